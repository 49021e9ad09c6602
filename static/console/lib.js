// What every console page shares: the REST call, the confirmation dialog, and building the page.
//
// Every action calls an operation over the REST door (POST /api/v1/ops/<name>, JSON, the session
// cookie and X-CSRFToken), exactly as the API documents it. A change that needs confirmation
// answers CONFIRMATION_REQUIRED with a proposal: the person sees it and, if they confirm, the same
// call is sent again with ?confirm=true. Text from the server is only ever set as text (never as
// HTML): names and client names can be chosen by anyone. The pages hold no rule of their own:
// what a person may do to a row comes with the row (e.g. `assignable_roles`, `renamable`).

const csrfToken = () => {
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
};

export class OperationError extends Error {
  constructor(error) {
    super(error.message);
    this.error = error;
  }
}

export async function call(op, body, confirm) {
  const url = `/api/v1/ops/${encodeURIComponent(op)}${confirm ? "?confirm=true" : ""}`;
  return post(url, "application/json", JSON.stringify(body || {}));
}

// One POST to the REST door with the session's CSRF token: the JSON answer, or an OperationError in the one
// error shape (the server's own, or one saying the server could not be reached or gave no such answer).
export async function post(url, contentType, body) {
  let response;
  try {
    response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": contentType, Accept: "application/json", "X-CSRFToken": csrfToken() },
      body,
    });
  } catch (_) {
    throw new OperationError({ code: "SERVICE_UNAVAILABLE", message: "The server could not be reached." });
  }
  let data = null;
  try {
    data = await response.json();
  } catch (_) {
    data = null;
  }
  if (!response.ok) {
    const error = data && data.error ? data.error : { code: "INTERNAL_ERROR", message: `The server answered ${response.status}.` };
    throw new OperationError(error);
  }
  return data;
}

// A file an operation answers with (content_base64, content_type, filename), saved by the browser.
export async function download(op, input) {
  try {
    const out = await call(op, input);
    const bytes = Uint8Array.from(atob(out.content_base64), (c) => c.charCodeAt(0));
    const link = el("a", { href: URL.createObjectURL(new Blob([bytes], { type: out.content_type })), download: out.filename, hidden: true });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
  } catch (err) {
    notice(describeError(err), true);
  }
}

// ------------------------------------------------------------ building the page (text only)

// Bidirectional embedding, override and isolate controls (U+202A-U+202E, U+2066-U+2069) would let a sender name,
// a subject or a file name show other than it is ("invoice\u202egpj.exe" reads "invoiceexe.jpg"): every text a
// page shows passes here and shows each as a visible marker, "[U+202E]", as operations already mark mail text
// (apps/core/bidi.py). Text from mail is also isolated where it is shown (dir="auto"), so it cannot spill over.
const BIDI_CONTROLS = /[\u202A-\u202E\u2066-\u2069]/g;
export const shown = (text) =>
  String(text).replace(BIDI_CONTROLS, (c) => `[U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}]`);

export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "onclick") node.addEventListener("click", value);
    else node.setAttribute(key, value === true ? "" : shown(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : shown(child)); // strings become text nodes
  }
  return node;
}

export const when = (iso) => (iso ? new Date(iso).toLocaleString() : "—");
export const list = (items, empty) => (items && items.length ? items.join(", ") : empty);

// A table in a box of its own that scrolls sideways on a narrow screen, so the page itself never does; at phone
// width each row shows as a card, each cell labelled by its column's header (data-label, console.css).
export function table(headers, rows) {
  const head = el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col" }, h))));
  return el("div", { class: "table-wrap", tabindex: "0" }, labelCells(el("table", {}, head, el("tbody", {}, rows))));
}

// Gives each body cell of `tableNode` its column's header text as data-label (a cell that has one keeps it); an
// empty header (an actions column) labels nothing. Rows a page builds or appends itself are labelled as they come.
export function labelCells(tableNode) {
  const headers = [...tableNode.querySelectorAll("thead th")].map((th) => th.textContent.trim());
  if (!headers.length) return tableNode;
  for (const tr of tableNode.querySelectorAll("tbody tr")) {
    [...tr.children].forEach((cell, i) => {
      if (cell.tagName === "TD" && !cell.hasAttribute("data-label") && i < headers.length) cell.setAttribute("data-label", headers[i]);
    });
  }
  return tableNode;
}

if (typeof MutationObserver !== "undefined" && document.body) {
  new MutationObserver((changes) => {
    const tables = new Set();
    for (const change of changes) {
      const node = change.target;
      const found = node.closest ? node.closest("table") : null;
      if (found) tables.add(found);
      for (const added of change.addedNodes) if (added.querySelectorAll) for (const t of added.querySelectorAll("table")) tables.add(t);
    }
    tables.forEach(labelCells);
  }).observe(document.body, { childList: true, subtree: true });
}

export function row(attrs, cells) {
  return el("tr", attrs, cells.map((c) => el("td", {}, c)));
}

// "What it did": the audit log of one API key ("apikey") or connection ("oauth")
export function auditLink(kind, id, name) {
  const query = new URLSearchParams({ credential_kind: kind, credential_id: id });
  // the accessible name holds the visible words (WCAG 2.5.3), then says whose
  return el("a", { href: `/audit?${query}`, "data-action": "audit", "aria-label": `What it did: ${name}` }, "What it did");
}

export function button(label, onClick, attrs) {
  return el("button", { type: "button", onclick: onClick, ...(attrs || {}) }, label);
}

// ------------------------------------------------------------ notices and confirmation

export function notice(text, isError) {
  const box = document.getElementById("notice");
  if (!box) return;
  box.textContent = shown(text || "");
  box.className = isError ? "errors" : "";
  box.hidden = !text;
}

// ------------------------------------------------------------ errors in plain words
//
// The one place a refusal becomes a sentence for a person: from the error shape's code and field, never the
// field's path (imap.password) or a validator's regular expression. `labels` names a page's own fields in words
// ({"imap.password": "The IMAP password"}); any other field is said in words made from its name.

const WORDS = { imap: "IMAP", smtp: "SMTP", id: "", ids: "", base64: "", url: "address", mime: "MIME" };
const IDENTIFIER = /(?<![@.\w])[a-z][a-z0-9]+(?:[._][a-z0-9]+)+\b/g; // snake_case or dotted names (an address's domain is left alone)

export function fieldWords(field) {
  const words = String(field || "").split(/[._]/).filter((w) => w && !/^\d+$/.test(w)).map((w) => (w in WORDS ? WORDS[w] : w)).filter(Boolean);
  return words.join(" ") || "this value";
}

const capital = (text) => text.charAt(0).toUpperCase() + text.slice(1);
const sentence = (text) => { const t = capital(text.trim()); return /[.!?]$/.test(t) ? t : `${t}.`; };

// what a validator said, in words (the gate's own "is required" and the like, pydantic's messages, the domain's)
const DETAILS = [
  [/^is required$/, (l) => `${l} is required`],
  [/^is not a field of this operation$/, () => "This form sent something the server does not take; reload the page and try again"],
  [/should have at least 1 (character|item)/, (l) => `${l} cannot be empty`],
  [/should have at least (\d+) characters?/, (l, m) => `${l} needs at least ${m[1]} characters`],
  [/should have at most (\d+) characters?/, (l, m) => `${l} is too long: at most ${m[1]} characters`],
  [/should have at least (\d+) items?/, (l, m) => `${l}: name at least ${m[1]}`],
  [/should have at most (\d+) items?/, (l, m) => `${l}: at most ${m[1]}`],
  [/valid integer|valid number/, (l) => `${l} must be a whole number`],
  [/greater than or equal to (-?[\d.]+)/, (l, m) => `${l} must be at least ${m[1]}`],
  [/greater than (-?[\d.]+)/, (l, m) => `${l} must be more than ${m[1]}`],
  [/less than or equal to (-?[\d.]+)/, (l, m) => `${l} must be at most ${m[1]}`],
  [/less than (-?[\d.]+)/, (l, m) => `${l} must be less than ${m[1]}`],
  [/valid email|not an e-mail address|not a valid e-mail/i, (l) => `${l} is not an e-mail address`],
  [/valid datetime|valid date/, (l) => `${l} is not a date and time`],
  [/^Input should be '|^Input should be "/, (l) => `${l} must be one of the choices offered`],
  [/pattern|regex|expected form/i, (l) => `${l} does not have the expected form`],
  [/^Input should be /, (l) => `${l} is not valid`],
];
const VERB = /^(is|are|does|do|must|needs|has|have|holds|cannot|can|should|was|were|only)\b/;

export function plainError(err, labels) {
  const error = err instanceof OperationError ? err.error : err && err.code ? err : null;
  if (!error) return "Something went wrong in this page; reload it and try again.";
  const field = error.field || "";
  const named = (labels || {})[field];
  const label = named || capital(fieldWords(field));
  let detail = String(error.message || "");
  if (field && detail.startsWith(`${field}: `)) detail = detail.slice(field.length + 2);
  detail = detail.replace(/^Value error, /, "");
  const words = (text) => text.replace(IDENTIFIER, (name) => (labels && labels[name]) || fieldWords(name));
  switch (error.code) {
    case "NOT_FOUND":
      return field ? sentence(`${label} was not found: it may have been removed, or it is not yours to see`) : "That was not found.";
    case "SERVICE_UNAVAILABLE":
      return "Oaken cannot be reached right now; nothing was changed. Try again in a moment.";
    case "INTERNAL_ERROR":
      return "Something went wrong on the server; nothing was changed. Try again, and tell your administrator if it persists.";
    case "RATE_LIMITED":
      return error.retry_after ? `Too many attempts: try again in ${error.retry_after} seconds.` : "Too many attempts: try again shortly.";
    case "UNAUTHENTICATED":
      return "You are signed out: sign in again.";
    case "INSUFFICIENT_SCOPE":
    case "FORBIDDEN":
    case "OUT_OF_SCOPE":
    case "NOT_AVAILABLE":
      return detail ? sentence(words(detail)) : "You may not do that here.";
    case "CONFLICT":
    case "LAST_OWNER":
    case "IDEMPOTENCY_MISMATCH":
    case "CONFIRMATION_INVALID":
      return detail ? sentence(words(detail)) : "That cannot be done now; reload the page.";
    case "LIMIT_EXCEEDED":
      if (field && detail) return sentence(`${label} is over the limit: ${words(detail)}`);
      break;
    default:
      break;
  }
  if (!field) return detail ? sentence(words(detail)) : "That was refused.";
  for (const [match, say] of DETAILS) {
    const found = detail.match(match);
    if (found) return sentence(say(label, found));
  }
  if (/[\^$\\[\]]/.test(detail)) return sentence(`${label} does not have the expected form`); // never a regex
  if (!detail) return sentence(`${label} is not valid`);
  const said = words(detail);
  return sentence(VERB.test(said) ? `${label} ${said}` : `${label}: ${said}`);
}

// The words a form gives its fields (each input's <label>), by the input's name: for plainError's `labels`.
export function formLabels(form) {
  const labels = {};
  for (const input of form ? form.querySelectorAll("[name][id]") : []) {
    const label = form.querySelector(`label[for="${CSS.escape(input.id)}"]`);
    if (label) labels[input.name] = label.textContent.trim();
  }
  return labels;
}

// (every page's refusals go through plainError; the name stays for the pages that use it)
export const describeError = (err) => plainError(err);

// The confirmation dialog says what will happen in words: the proposal's question, its sentence, a short list
// and the verb on the button (apps/core/words.py); never the changes' ids or fields, which are for programs.
function ask(proposal) {
  const dialog = document.getElementById("confirm-dialog");
  dialog.querySelector("#confirm-title").textContent = shown(proposal.title || "Make this change?");
  dialog.querySelector("#confirm-yes").textContent = shown(proposal.verb || "Confirm");
  dialog.querySelector("[data-summary]").textContent = shown(proposal.summary || "");
  dialog.querySelector("[data-changes]").replaceChildren(...(proposal.lines || []).map((line) => el("li", {}, line)));
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "confirm"), { once: true });
    dialog.showModal();
  });
}

// The page's own second ask before a change the operation takes at once (approving or rejecting a send): a
// dialog saying what will happen, optionally with a text box (`input`: {label, maxlength}); resolves to
// {text} when the person confirms, null when they cancel. The operation's own confirmation rule is unchanged.
export function askFirst(title, text, confirmLabel, input) {
  const dialog = el("dialog", { class: "ask-first", "aria-labelledby": "ask-first-title" });
  const box = input ? el("textarea", { id: "ask-first-text", name: "text", rows: "3", maxlength: input.maxlength || null }) : null;
  const form = el("form", { method: "dialog" },
    el("h2", { id: "ask-first-title" }, title),
    el("p", {}, text),
    box ? el("label", { for: "ask-first-text" }, input.label) : null,
    box,
    el("button", { type: "submit", value: "cancel" }, "Cancel"),
    " ",
    el("button", { type: "submit", value: "confirm", id: "ask-first-yes" }, confirmLabel),
  );
  dialog.append(form);
  document.body.append(dialog);
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      const confirmed = dialog.returnValue === "confirm";
      const value = box ? box.value : "";
      dialog.remove();
      resolve(confirmed ? { text: value } : null);
    }, { once: true });
    dialog.showModal();
    if (box) box.focus();
  });
}

export const isAsking = () => Boolean(document.querySelector("dialog[open]"));

// Calls `op`; on CONFIRMATION_REQUIRED shows the proposal and, once confirmed, calls again with
// confirm. Returns the output, or null when it was refused or not confirmed (the notice says so;
// `refused`, when given, also gets the refusal's error: its code, message and field).
export async function perform(op, body, done, refused) {
  const refuse = (err) => {
    notice(describeError(err), true);
    if (refused && err instanceof OperationError) refused(err.error);
    return null;
  };
  notice("");
  try {
    const output = await call(op, body, false);
    if (done) notice(done);
    return output;
  } catch (err) {
    if (!(err instanceof OperationError) || err.error.code !== "CONFIRMATION_REQUIRED") return refuse(err);
    if (!(await ask(err.error.proposal || {}))) {
      notice("Nothing was changed.");
      return null;
    }
  }
  try {
    const output = await call(op, body, true);
    if (done) notice(done);
    return output;
  } catch (err) {
    return refuse(err);
  }
}

// Calls `op` and shows render(output) in the element `targetId` (or why it failed); the output, or null.
export async function load(op, targetId, render) {
  const target = document.getElementById(targetId);
  if (!target) return null;
  try {
    const output = await call(op, {});
    target.replaceChildren(render(output));
    return output;
  } catch (err) {
    target.replaceChildren(el("p", { class: "errors" }, describeError(err)));
    return null;
  }
}

// Runs handler(form) on submit instead of sending the form, its submit button disabled meanwhile.
export function onSubmit(formId, handler) {
  const form = document.getElementById(formId);
  if (!form) return;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const submit = form.querySelector('button[type="submit"]');
    if (submit) submit.disabled = true;
    try {
      await handler(form);
    } finally {
      if (submit) submit.disabled = false;
    }
  });
}

export const names = (text) => text.split(",").map((s) => s.trim()).filter(Boolean);

// ------------------------------------------------------------ a toast with one action (Undo)

// Says `text` for a few seconds at the foot of the page (role=status), with a button `actionLabel` that runs
// onAction and closes it; a new toast takes the place of the one shown. Returns a function that closes it.
export function toast(text, actionLabel, onAction, seconds = 8) {
  let box = document.getElementById("toast");
  if (!box) {
    box = el("div", { id: "toast", class: "toast", role: "status", "aria-live": "polite" });
    document.body.append(box);
  }
  clearTimeout(Number(box.dataset.timer || 0));
  const close = () => {
    box.replaceChildren();
    box.classList.remove("shown");
  };
  const parts = [el("span", {}, text)];
  if (actionLabel && onAction) {
    parts.push(el("button", { type: "button", class: "toast-action", onclick: () => { close(); onAction(); } }, actionLabel));
  }
  box.replaceChildren(...parts);
  box.classList.add("shown");
  box.dataset.timer = String(setTimeout(close, seconds * 1000));
  return close;
}

// A panel of what something did (a rule, an automation): shown and focused at once, filled by `op`'s `history`,
// newest first, one list item a line (`item`), or `none` when it did nothing yet.
export async function showHistory({ section, title, body, heading, op, input, none, item }) {
  section.hidden = false;
  title.textContent = heading;
  body.replaceChildren(el("p", { class: "hint" }, "Loading…"));
  title.focus();
  let out;
  try {
    out = await call(op, { ...input, history: 20 });
  } catch (err) {
    body.replaceChildren(el("p", { class: "errors" }, plainError(err)));
    return;
  }
  if (!out.history.length) {
    body.replaceChildren(el("p", { class: "hint" }, none));
    return;
  }
  const n = out.history.length;
  body.replaceChildren(
    el("p", { class: "hint" }, `Its last ${n} ${n === 1 ? "message" : "messages"}, newest first.`),
    el("ul", { class: "rule-log" }, out.history.map(item)),
  );
}
