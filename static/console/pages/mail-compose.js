// /mail's writing: a new message, a reply, a reply to all, a forward (with the original's files), the drafts
// written here (a row deleted after the page asks first), and a signature per account. Everything is an operation: create_draft, update_draft,
// reply_to_message, forward_message, list_drafts, delete_draft, send_draft, schedule_draft ("Send later"),
// list_signatures and set_signature.
//
// A draft is created at the person's first change and then saved as they type: update_draft a moment after they
// pause, with only the fields that changed. Files are read in the browser and sent with the next save; the
// draft's own files (a forward's, or those saved before) are kept by their ids (draft_attachment_id), so adding
// or removing one never sends the others again. Send waits for the last save, then calls send_draft through
// perform() (the gate's proposal is shown and confirmed), with a new idempotency key for every click: a retry of
// the same click returns the same request, a new click is a new request. A new message gets the account's
// signature below a "-- " line; a reply or forward gets it above the quoted text.
import { askFirst, call, describeError, el, names, notice, perform, plainError } from "../lib.js";
import * as snippets from "./mail-snippets.js";

const SAVE_DELAY_MS = 800;
const FIELDS = ["to", "cc", "bcc", "subject", "body"];
const LISTS = ["to", "cc", "bcc"];

const composer = document.getElementById("composer");
const title = document.getElementById("composer-title");
const form = document.getElementById("compose-form");
const fromSelect = document.getElementById("compose-from");
const inputs = Object.fromEntries(FIELDS.map((f) => [f, document.getElementById(`compose-${f}`)]));
const fileInput = document.getElementById("compose-files");
const fileList = document.getElementById("compose-attachments");
const stateLine = document.getElementById("compose-state");
const sendButton = document.getElementById("compose-send");
const scheduleButton = document.getElementById("compose-schedule");
const sendAt = document.getElementById("compose-send-at");
const draftsView = document.getElementById("drafts-view");
const draftsList = document.getElementById("drafts-list");
const signatureForms = document.getElementById("signature-forms");
const VIEWS = ["mail-list-view", "reader", "drafts-view", "composer"].map((id) => document.getElementById(id));

const size = (n) => (n < 1024 ? `${n} bytes` : n < 1024 * 1024 ? `${Math.round(n / 1024)} KB` : `${(n / 1024 / 1024).toFixed(1)} MB`);

let accounts = [];
const signatures = {}; // account id -> text
let back = null; // the view to return to when the composer closes
let session = null; // the draft being written

function newSession(draft) {
  return {
    draft, // the draft as last saved (null: not created yet)
    saved: draft ? snapshotOf(draft) : { to: [], cc: [], bcc: [], subject: "", body: "" },
    files: draft ? draft.attachments.map((a) => ({ ...a })) : [], // {id} kept, or {filename, content_base64} new
    filesVersion: 0, // bumped at every change to the files; saved when it differs from savedFiles
    savedFiles: 0,
    timer: null,
    savedAt: draft ? new Date(draft.updated_at) : null, // when the page last saved it
    chain: Promise.resolve(true),
    reading: 0, // files being read
    saving: 0, // saves asked for and not yet answered
  };
}

const snapshotOf = (d) => ({ to: d.to, cc: d.cc, bcc: d.bcc, subject: d.subject, body: d.body });

function current() {
  const now = {};
  for (const f of FIELDS) now[f] = LISTS.includes(f) ? names(inputs[f].value) : inputs[f].value;
  return now;
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

function signatureBlock(accountId) {
  const text = signatures[accountId];
  return text ? `\n\n-- \n${text}` : "";
}

// ------------------------------------------------------------ showing the composer

function show(view) {
  const open = VIEWS.find((v) => !v.hidden && v !== view);
  if (view !== composer && view !== draftsView) return;
  if (open && open !== composer && open !== draftsView) back = open;
  for (const v of VIEWS) v.hidden = v !== view;
}

function goBack() {
  for (const v of VIEWS) v.hidden = v !== (back || VIEWS[0]);
}

// an account as the From line of its mail reads ("Ann Lee <ann@example.com>": its sender name, never its label),
// then the account's own name to tell accounts apart
function fromLine(a) {
  if (!a.email_address) return a.name;
  const header = a.sender_name ? `${a.sender_name} <${a.email_address}>` : a.email_address;
  return `${header} · ${a.name}`;
}

function fill(draft, heading) {
  session = newSession(draft);
  title.textContent = heading;
  fromSelect.replaceChildren(...accounts.map((a) => el("option", { value: a.id }, fromLine(a))));
  if (draft) fromSelect.value = draft.account_id;
  fromSelect.disabled = Boolean(draft); // a draft stays in its account
  for (const f of FIELDS) inputs[f].value = draft ? (LISTS.includes(f) ? draft[f].join(", ") : draft[f]) : "";
  inputs.body.readOnly = Boolean(draft && draft.body_truncated);
  sendAt.value = "";
  setState(draft && draft.body_truncated ? `This draft's text is longer than the page shows (${draft.body_length} characters): it is kept as it is.` : savedLine(session));
  renderFiles();
  show(composer);
}

function setState(text, isError) {
  stateLine.textContent = text;
  stateLine.className = isError ? "errors" : "hint";
}

function renderFiles() {
  fileList.replaceChildren(
    ...session.files.map((f) =>
      el("li", { "data-filename": f.filename },
        el("span", {}, f.filename),
        el("span", { class: "hint" }, ` ${f.content_type}, ${size(f.size)} `),
        el("button", { type: "button", class: "remove-file", "aria-label": `Remove ${f.filename}`, onclick: () => removeFile(f) }, "Remove"),
      ),
    ),
  );
}

// ------------------------------------------------------------ saving as the person types

function scheduleSave() {
  if (!session) return;
  clearTimeout(session.timer);
  setState("Not saved yet…");
  session.timer = setTimeout(() => saveNow(), SAVE_DELAY_MS);
}

// Saves what changed since the last save, after any save under way; true when the draft holds what is shown.
function saveNow() {
  const s = session;
  clearTimeout(s.timer);
  s.timer = null;
  setState("Saving…");
  s.saving++;
  s.chain = s.chain.then(() => saveOnce(s)).finally(() => s.saving--);
  return s.chain;
}

function attachmentsIn(files) {
  return files.map((f) =>
    f.id ? { draft_attachment_id: f.id } : { filename: f.filename, content_type: f.content_type, content_base64: f.content_base64 },
  );
}

async function saveOnce(s) {
  const now = current();
  const files = s.files.slice();
  const version = s.filesVersion;
  const filesChanged = version !== s.savedFiles;
  let out;
  try {
    if (!s.draft) {
      if (same(now, s.saved) && !filesChanged) return unchanged(s); // nothing written yet
      out = await call("create_draft", { account_id: fromSelect.value, ...now, attachments: attachmentsIn(files) });
    } else {
      const body = { draft_id: s.draft.id };
      for (const f of FIELDS) if (!same(now[f], s.saved[f])) body[f] = now[f];
      if (inputs.body.readOnly) delete body.body;
      if (filesChanged) body.attachments = attachmentsIn(files);
      if (Object.keys(body).length === 1) return unchanged(s);
      out = await call("update_draft", body);
    }
  } catch (err) {
    if (s === session) setState(`Not saved: ${describeError(err)}`, true);
    return false;
  }
  s.draft = out;
  s.saved = now;
  s.savedFiles = version;
  s.savedAt = new Date();
  // the draft's files now, in the order given: each keeps its new id (update_draft stores them afresh)
  files.forEach((f, i) => {
    const held = out.attachments[i];
    if (!held) return;
    f.id = held.id;
    delete f.content_base64;
  });
  if (s === session) {
    fromSelect.disabled = true;
    if (!s.timer) setState(savedLine(s));
  }
  return true;
}

const savedLine = (s) => (s.savedAt ? `Draft saved at ${s.savedAt.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })}.` : "");

// nothing to save: the line says what holds
function unchanged(s) {
  if (s === session && !s.timer) setState(savedLine(s));
  return true;
}

form.addEventListener("input", (event) => {
  if (event.target === fileInput || event.target === sendAt) return; // (when to send is not the draft's)
  scheduleSave();
});

fromSelect.addEventListener("change", () => {
  // before the first save the account may change: its signature replaces the other's
  if (!session || session.draft) return;
  const body = inputs.body.value;
  const old = accounts.map((a) => signatureBlock(a.id)).find((b) => b && body.endsWith(b));
  inputs.body.value = (old ? body.slice(0, -old.length) : body) + signatureBlock(fromSelect.value);
  session.saved.body = session.draft ? session.saved.body : inputs.body.value;
});

// ------------------------------------------------------------ files

function base64Of(buffer) {
  const bytes = new Uint8Array(buffer);
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
}

fileInput.addEventListener("change", async () => {
  const s = session;
  const picked = [...fileInput.files];
  fileInput.value = "";
  if (!s || !picked.length) return;
  s.reading++;
  sendButton.disabled = scheduleButton.disabled = true;
  setState("Reading the files…");
  try {
    for (const file of picked) {
      const content = base64Of(await file.arrayBuffer());
      s.files.push({ filename: file.name, content_type: file.type || "application/octet-stream", size: file.size, content_base64: content });
    }
  } catch (_) {
    setState("A file could not be read.", true);
  } finally {
    s.reading--;
    sendButton.disabled = scheduleButton.disabled = s.reading > 0;
  }
  s.filesVersion++;
  if (s === session) renderFiles();
  saveNow();
});

function removeFile(file) {
  session.files = session.files.filter((f) => f !== file);
  session.filesVersion++;
  renderFiles();
  saveNow();
}

// ------------------------------------------------------------ starting one

export function compose() {
  if (!accounts.length) {
    notice("No mail account to write from yet: connect one on the Mailboxes page.", true);
    return;
  }
  fill(null, "New message");
  inputs.body.value = signatureBlock(fromSelect.value);
  session.saved.body = inputs.body.value; // the signature alone is not yet a draft
  inputs.to.focus();
}

async function started(op, body, heading) {
  if (!(await leave())) return;
  let draft;
  try {
    draft = await call(op, body);
  } catch (err) {
    notice(describeError(err), true);
    return;
  }
  fill(draft, heading);
  setState(savedLine(session));
  (draft.to.length ? inputs.body : inputs.to).focus();
  inputs.body.setSelectionRange(0, 0);
}

// a reply (to all): its sender, Re: subject, threading headers and quoted text from reply_to_message
export function reply(m, all) {
  return started("reply_to_message", { message_id: m.id, reply_all: all, body: signatureBlock(m.account_id) }, all ? "Reply to all" : "Reply");
}

// a forward with the original's files, from forward_message
export function forward(m) {
  return started("forward_message", { message_id: m.id, body: signatureBlock(m.account_id), attachments: true }, "Forward");
}

export async function openDraft(draft) {
  if (!composer.hidden && !(await leave())) return;
  fill(draft, draft.subject ? `Draft: ${draft.subject}` : "Draft");
  inputs.to.focus();
}

// Leaves the composer (its last changes saved first); false when they could not be saved, and it stays open.
export async function leave() {
  if (!session || composer.hidden) {
    draftsView.hidden = true;
    return true;
  }
  const saved = await saveNow();
  if (!saved) return false;
  composer.hidden = true;
  session = null;
  return true;
}

document.getElementById("compose-close").addEventListener("click", async () => {
  const s = session;
  if (await leave()) {
    notice(s && s.draft ? "The draft is kept under Drafts." : "");
    goBack();
  }
});

document.getElementById("compose-discard").addEventListener("click", async () => {
  const s = session;
  clearTimeout(s.timer);
  s.timer = null;
  await s.chain;
  if (s.draft && !(await perform("delete_draft", { draft_id: s.draft.id }, "The draft was discarded."))) return;
  if (!s.draft) notice("Nothing was saved.");
  composer.hidden = true;
  session = null;
  goBack();
});

// ------------------------------------------------------------ sending

function newKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// Send (send_draft) or Send later (schedule_draft, at `sendAt`): the last save first, then the gate's proposal
// shown and confirmed; the request holds its own copy, so the draft this mail was goes. `say` words the answer.
async function request(op, extra, say, labels) {
  const s = session;
  if (!s || sendButton.disabled) return;
  sendButton.disabled = scheduleButton.disabled = true;
  try {
    if (!(await saveNow())) {
      notice("The draft could not be saved, so it was not sent.", true);
      return;
    }
    if (!s.draft) {
      notice("Write something first: there is nothing to send.", true);
      return;
    }
    const draftId = s.draft.id;
    const out = await perform(op, { draft_id: draftId, idempotency_key: newKey(), ...extra }, null,
      (error) => notice(plainError(error, labels), true));
    if (!out) return;
    try {
      await call("delete_draft", { draft_id: draftId }, true); // confirmed by the request itself
    } catch (_) {
      /* kept under Drafts: nothing lost */
    }
    if (s === session) {
      composer.hidden = true;
      session = null;
      goBack();
    }
    notice(say(out));
  } finally {
    sendButton.disabled = scheduleButton.disabled = false;
  }
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  request("send_draft", {}, (out) => `Sending: ${out.next}`);
});

// the time is the person's own, in their browser's time zone; the operation decides whether it will do
const SCHEDULED = {
  approved: (at) => `Scheduled: it will be sent on ${at}. Until then it waits on the Outbound page, where it can be cancelled.`,
  awaiting_approval: (at) => `Scheduled for ${at}, once a person approves it on the Outbound page; nothing is sent before.`,
};

scheduleButton.addEventListener("click", () => {
  if (!sendAt.value) {
    notice("Choose the date and time to send it at first.", true);
    sendAt.focus();
    return;
  }
  const at = new Date(sendAt.value);
  if (Number.isNaN(at.getTime())) {
    notice("The time to send it is not a date and time.", true);
    sendAt.focus();
    return;
  }
  request("schedule_draft", { send_at: at.toISOString() }, (out) => {
    const time = new Date(out.send_at).toLocaleString([], { dateStyle: "full", timeStyle: "short" });
    return (SCHEDULED[out.state] || ((t) => `Scheduled for ${t}: ${out.next}`))(time);
  }, { send_at: "The time to send it" });
});

// ------------------------------------------------------------ drafts

// `again`: the list is redrawn where it is (after a delete), without "Loading…" in between
export async function showDrafts(again) {
  if (!(await leave())) return;
  show(draftsView);
  if (again !== true) draftsList.replaceChildren(el("p", { class: "hint" }, "Loading…"));
  let out;
  try {
    out = await call("list_drafts", {});
  } catch (err) {
    draftsList.replaceChildren(el("p", { class: "errors" }, describeError(err)));
    return;
  }
  if (!out.drafts.length) {
    draftsList.replaceChildren(el("p", { class: "hint" }, "No drafts."));
    return;
  }
  draftsList.replaceChildren(
    el("ul", { class: "messages drafts" },
      out.drafts.map((d) =>
        el("li", { class: "message draft", "data-draft-id": d.id },
          el("span", {}),
          el("button", { type: "button", class: "open", onclick: () => openDraft(d) },
            el("span", { class: "sender" }, d.to.length ? `To ${d.to.join(", ")}` : "(no recipient yet)"),
            el("span", { class: "subject" }, d.subject || "(no subject)"),
            el("span", { class: "snippet" }, d.body.slice(0, 200)),
          ),
          el("span", { class: "meta" },
            d.attachments.length ? el("span", { class: "clip" }, `${d.attachments.length} attached`) : null,
            el("time", { datetime: d.updated_at }, new Date(d.updated_at).toLocaleString()),
            el("button", { type: "button", class: "delete-draft", "aria-label": `Delete the draft ${draftName(d)}`, onclick: () => deleteDraft(d) }, "Delete"),
          ),
        ),
      ),
    ),
  );
}

const draftName = (d) => `“${d.subject || "(no subject)"}”${d.to.length ? ` to ${d.to.join(", ")}` : ""}`;

// Delete from the list: the page asks first, saying which draft; that answer is the confirmation delete_draft
// asks for, so the call goes with it (the gate's proposal would only ask the same again).
async function deleteDraft(d) {
  const asked = await askFirst("Delete this draft?",
    `The draft ${draftName(d)}${d.attachments.length ? `, with ${d.attachments.length} attached file(s),` : ""} is deleted; it cannot be brought back. Requests already made from it are kept.`,
    "Delete draft");
  if (!asked) return notice("Nothing was changed.");
  try {
    await call("delete_draft", { draft_id: d.id }, true);
  } catch (err) {
    notice(describeError(err), true);
    return showDrafts(true);
  }
  await showDrafts(true);
  notice("The draft was deleted.");
}

document.getElementById("drafts-back").addEventListener("click", () => {
  draftsView.hidden = true;
  goBack();
});

// ------------------------------------------------------------ signatures

function signatureForm(account) {
  const id = `signature-${account.id}`;
  const text = el("textarea", { id, rows: "4", maxlength: "100000" });
  text.value = signatures[account.id] || "";
  const save = el("button", { type: "submit" }, "Save signature");
  const formEl = el("form", { class: "signature", "data-account-id": account.id },
    el("label", { for: id }, `Signature for ${account.name}`),
    text,
    save,
  );
  formEl.addEventListener("submit", async (event) => {
    event.preventDefault();
    save.disabled = true;
    try {
      const out = await perform("set_signature", { account_id: account.id, text: text.value }, `Signature for ${account.name} saved.`);
      if (out) {
        signatures[account.id] = out.text;
        text.value = out.text;
      }
    } finally {
      save.disabled = false;
    }
  });
  return formEl;
}

async function loadSignatures() {
  try {
    const out = await call("list_signatures", {});
    for (const s of out.signatures) signatures[s.account_id] = s.text;
  } catch (err) {
    signatureForms.replaceChildren(el("p", { class: "errors" }, describeError(err)));
    return;
  }
  signatureForms.replaceChildren(...accounts.map(signatureForm));
}

// mail.js gives the accounts once it has them
export function start(found) {
  accounts = found;
  loadSignatures();
  snippets.load();
}

// "Insert a snippet": its text filled by the server (fill_snippet) for the account written from and the message
// answered or forwarded, put where the person is typing, then saved like anything typed
document.getElementById("compose-snippet-insert").addEventListener("click", async () => {
  const picked = document.getElementById("compose-snippet").value;
  if (!session || !picked) return;
  const body = { snippet_id: picked, account_id: fromSelect.value, subject: inputs.subject.value };
  if (session.draft && session.draft.source_message_id) body.message_id = session.draft.source_message_id;
  let out;
  try {
    out = await call("fill_snippet", body);
  } catch (err) {
    setState(describeError(err), true);
    return;
  }
  const area = inputs.body;
  if (area.readOnly) return;
  const after = area.value.slice(area.selectionEnd);
  const text = after && !after.startsWith("\n") ? `${out.text}\n\n` : out.text; // kept apart from what follows
  area.setRangeText(text, area.selectionStart, area.selectionEnd, "end");
  area.focus();
  scheduleSave();
});

// leaving the page with a change not yet saved: the browser asks first
window.addEventListener("beforeunload", (event) => {
  if (session && (session.timer || session.saving || session.reading)) event.preventDefault();
});

document.getElementById("compose-new").addEventListener("click", async () => {
  if (await leave()) compose();
});
document.getElementById("drafts-open").addEventListener("click", showDrafts);
