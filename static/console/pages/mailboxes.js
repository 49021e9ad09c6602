// /mailboxes: the tenant's mail accounts, sync on demand, removal, and connecting an IMAP mailbox.
import { button, call, describeError, el, formLabels, load, notice, onSubmit, perform, plainError, post, row, table, when } from "../lib.js";

// the page says whether this person may remove accounts, or name their sender (the server renders it, from their role)
const mayRemove = document.getElementById("accounts-list").hasAttribute("data-can-remove");
const mayNameSender = document.getElementById("accounts-list").hasAttribute("data-can-name-sender");

const lastSync = (a) => (a.kind === "imap" ? (a.last_synced_at ? when(a.last_synced_at) : "not yet") : "—");

const actions = (a) => {
  const buttons = [];
  if (a.kind === "imap") buttons.push(button("Sync now", () => syncNow(a), { "data-action": "sync" }));
  if (mayRemove) buttons.push(button("Remove", () => remove(a), { "data-action": "remove" }));
  return el("span", {}, buttons.flatMap((b, i) => (i ? [" ", b] : [b])));
};

// messages and unread per account (mailbox_counts: every folder's, added up); none while they cannot be read
const countsOf = async () => {
  try {
    const out = await call("mailbox_counts", {});
    const sums = new Map();
    for (const a of out.accounts) {
      sums.set(a.account_id, a.folders.reduce((s, f) => ({ total: s.total + f.total, unread: s.unread + f.unread }), { total: 0, unread: 0 }));
    }
    return sums;
  } catch (_) {
    return new Map();
  }
};

// While a sync is on its way (asked for here, or a new mailbox not synced yet) the list reloads every few seconds,
// while the page is in view, and stops once each of those accounts has synced (or failed, or after two minutes).
const POLL_MS = 3000;
const POLL_FOR_MS = 120_000;
const awaited = new Map(); // account id -> {since: the last sync seen when it was asked for, until: ms}
let timer = null;

const expect = (a) => awaited.set(a.id, { since: a.last_synced_at || "", error: a.sync_error || "", until: Date.now() + POLL_FOR_MS });

const settle = (accounts) => {
  const now = Date.now();
  for (const a of accounts) {
    if (a.kind === "imap" && !a.last_synced_at && !a.sync_error && !awaited.has(a.id)) expect(a); // connected, not synced yet
    const wait = awaited.get(a.id);
    if (wait && ((a.last_synced_at || "") !== wait.since || (a.sync_error || "") !== wait.error || now > wait.until)) awaited.delete(a.id);
  }
  for (const id of [...awaited.keys()]) if (!accounts.some((a) => a.id === id)) awaited.delete(id);
  clearTimeout(timer);
  timer = awaited.size ? setTimeout(poll, POLL_MS) : null;
};

const poll = () => {
  if (document.hidden) {
    timer = null; // picked up again when the page is shown
    return;
  }
  refresh();
};
document.addEventListener("visibilitychange", () => {
  if (!document.hidden && awaited.size && !timer) refresh();
});

const syncing = (a) => (awaited.has(a.id) ? el("span", { class: "hint", "data-syncing": "" }, "syncing…") : lastSync(a));

// a connected mailbox's sender name (set_mailbox_sender_name), and a form in its place to change it
const senderShown = (a) => (a.kind !== "imap" ? "—" : a.sender_name ? el("span", { dir: "auto" }, a.sender_name) : el("span", { class: "hint" }, "none (the address alone)"));

function senderCell(a) {
  const cell = el("span", { "data-sender-name": a.id }, senderShown(a));
  if (a.kind !== "imap" || !mayNameSender) return cell;
  const edit = button("Change", () => {
    const id = `sender-name-${a.id}`;
    const input = el("input", { id, name: "sender_name", type: "text", value: a.sender_name, autocomplete: "name" });
    const error = el("p", { class: "errors", hidden: true });
    const form = el("form", { class: "sender-name", "data-sender-form": a.id },
      el("label", { for: id }, `Sender name of ${a.name}`), input, error,
      el("button", { type: "submit" }, "Save"), " ", button("Cancel", () => cell.replaceChildren(senderShown(a), " ", edit)));
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const out = await perform("set_mailbox_sender_name", { account_id: a.id, sender_name: input.value.trim() }, null, (err) => {
        error.textContent = plainError(err, { sender_name: "The sender name" });
        error.hidden = false;
        input.focus();
      });
      if (!out) return;
      notice(out.sender_name ? `${a.name} now sends as “${out.sender_name} <${out.email_address}>”.` : `${a.name} now sends as ${out.email_address} alone.`);
      cell.replaceChildren(senderShown({ ...a, sender_name: out.sender_name })); // the form closes, so the list may be drawn again
      refresh();
    });
    cell.replaceChildren(form);
    input.focus();
  }, { "data-action": "sender-name", "aria-label": `Change the sender name of ${a.name}` });
  cell.append(" ", edit);
  return cell;
}

const render = (listed, counts) =>
  listed.accounts.length
    ? table(
        ["Name", "Kind", "Address", "Sender name", "Workspace", "Messages", "Unread", "Last sync", "Sync error", ""],
        listed.accounts.map((a) => {
          const count = counts.get(a.id) || { total: 0, unread: 0 };
          return row({ "data-account-id": a.id }, [
            a.name,
            a.kind === "imap" ? "IMAP/SMTP" : "imported",
            a.email_address || "—",
            senderCell(a),
            a.workspace,
            el("span", { "data-count": "total" }, String(count.total)),
            el("span", { "data-count": "unread" }, String(count.unread)),
            syncing(a),
            a.sync_error ? el("span", { class: "errors", "data-sync-error": a.sync_error }, a.sync_problem) : "",
            actions(a),
          ]);
        }),
      )
    : el("p", { class: "hint" }, "No mail accounts yet.");

const refresh = async () => {
  const target = document.getElementById("accounts-list");
  let listed;
  let counts;
  try {
    [listed, counts] = await Promise.all([call("list_accounts", {}), countsOf()]);
  } catch (err) {
    target.replaceChildren(el("p", { class: "errors" }, describeError(err)));
    return null;
  }
  settle(listed.accounts); // before rendering, so an account that just synced no longer says "syncing…"
  // a sender name being written stays as it is: the list is drawn again at the next poll, or once it is saved
  if (target.querySelector("form[data-sender-form]")) return listed;
  target.replaceChildren(render(listed, counts));
  return listed;
};

// how much of the mail search finds by meaning; new mail is found by its words at once, by meaning once embedded
const indexState = () =>
  load("status", "search-index", (out) => {
    const s = out.search;
    const parts = [
      el("label", { for: "search-progress" }, `${s.indexed} of ${s.messages} messages found by meaning`),
      " ",
      el("progress", { id: "search-progress", max: String(Math.max(s.messages, 1)), value: String(s.indexed) }),
    ];
    if (s.waiting) parts.push(el("p", { class: "hint", "data-waiting": String(s.waiting) }, `${s.waiting} waiting to be indexed; they are found by their words meanwhile.`));
    if (s.other_model) parts.push(el("p", { class: "hint" }, `${s.other_model} were indexed by an earlier model; an admin can re-index them (rebuild_search_index).`));
    if (s.waiting) setTimeout(indexState, 5000);
    return el("div", {}, parts);
  });
indexState();

const syncNow = async (a) => {
  const out = await perform("sync_mailbox", { account_id: a.id }, `${a.name}: a sync is on its way.`);
  if (!out) return;
  if (out.queued) expect(a);
  refresh();
};

const remove = async (a) => {
  const out = await perform("remove_mailbox", { account_id: a.id });
  if (!out) return;
  notice(`${a.name} is removed with the ${out.messages_removed} messages Oaken held for it.`);
  refresh();
};

const form = document.getElementById("connect-mailbox");
if (form) {
  const select = document.getElementById("mailbox-workspace");
  call("list_workspaces", {}).then(
    (out) => select.replaceChildren(...out.workspaces.map((w) => el("option", { value: w.name, selected: w.name === "default" }, w.name))),
    () => {}, // the "default" option stays
  );
  const slots = [...form.querySelectorAll("[data-error-for]")];
  const clearErrors = () => slots.forEach((slot) => { slot.textContent = ""; slot.hidden = true; });
  const showError = (error) => {
    const slot = slots.find((s) => s.dataset.errorFor === error.field);
    if (!slot) return;
    slot.textContent = plainError(error, formLabels(form)); // in words, never the field's path
    slot.hidden = false;
    const input = form.elements.namedItem(error.field);
    if (input && input.focus) input.focus();
  };
  onSubmit("connect-mailbox", async () => {
    clearErrors();
    const value = (name) => (form.elements.namedItem(name).value || "").trim();
    const server = (part) => {
      const settings = { host: value(`${part}.host`), security: value(`${part}.security`) };
      if (value(`${part}.port`)) settings.port = Number(value(`${part}.port`));
      if (value(`${part}.username`)) settings.username = value(`${part}.username`);
      const password = form.elements.namedItem(`${part}.password`).value; // passwords are sent as typed
      if (password) settings.password = password;
      return settings;
    };
    const body = { account_name: value("account_name"), workspace: value("workspace"), imap: server("imap"), smtp: server("smtp") };
    if (value("email_address")) body.email_address = value("email_address");
    for (const part of ["imap", "smtp"]) form.elements.namedItem(`${part}.password`).value = ""; // never kept in the page
    const out = await perform("connect_mailbox", body, null, showError);
    if (!out) return;
    form.reset();
    notice(`${out.name} is connected; its mail is syncing.`);
    refresh();
  });
}

refresh();

// the person's own name (set_preferences): a mailbox they connect from now on sends under it
const nameForm = document.getElementById("person-name");
if (nameForm) {
  const input = document.getElementById("person-name-input");
  const slot = nameForm.querySelector('[data-error-for="name"]');
  // the form opens once the saved name is in it (so nothing typed meanwhile is overwritten)
  const open = () => { input.disabled = false; nameForm.querySelector('button[type="submit"]').disabled = false; };
  call("get_preferences", {}).then((out) => { input.value = out.name; open(); }, open);
  onSubmit("person-name", async () => {
    slot.hidden = true;
    const out = await perform("set_preferences", { name: input.value.trim() }, null, (err) => {
      slot.textContent = plainError(err, formLabels(nameForm));
      slot.hidden = false;
      input.focus();
    });
    if (!out) return;
    input.value = out.name;
    notice(out.name ? `Your name is saved: a mailbox you connect sends as “${out.name}”.` : "Your name is taken away: a mailbox you connect sends under its address alone.");
  });
}

// connecting by OAuth (apps/console/mailoauth.py): a provider's button posts the start of the flow (under the CSRF
// check, so no other site can start one) and goes to the provider's address it answers (a navigation: the console's
// CSP lets no form post on to the provider); a provider that does not say the mailbox's address leaves a form asking
// for it, which finishes through connect_mailbox_oauth
const startPath = document.getElementById("mail-oauth-providers")?.dataset.oauthStart;
async function startFlow(fields) {
  try {
    const out = await post(startPath, "application/x-www-form-urlencoded", new URLSearchParams(fields).toString());
    window.location.assign(out.url);
  } catch (err) {
    notice(describeError(err), true);
  }
}
document.querySelectorAll("[data-oauth-provider]").forEach((b) => b.addEventListener("click", () => startFlow({ provider: b.dataset.oauthProvider })));
const oauthNotice = document.querySelector("[data-oauth-notice]");
if (oauthNotice) oauthNotice.scrollIntoView({ block: "center" });
const reconnectList = document.getElementById("mail-oauth-reconnect");
// a mailbox whose provider withdrew Oaken's access: Reconnect runs the flow again for the same account (its mail stays)
const showReconnects = () =>
  call("list_accounts", {}).then(
    (out) => {
      const waiting = out.accounts.filter((a) => a.needs_reconnect);
      reconnectList.replaceChildren(
        ...waiting.map((a) =>
          el("p", { "data-reconnect": a.id }, `${a.name} (${a.email_address}): the provider withdrew Oaken's access. `, button("Reconnect", () => startFlow({ provider: a.provider, account_id: a.id }))),
        ),
      );
    },
    () => {}, // the accounts list above shows the refusal
  );
if (reconnectList && startPath) showReconnects();
const askAddress = document.getElementById("mail-oauth-address");
if (askAddress) {
  onSubmit("mail-oauth-address", async () => {
    const body = { grant: askAddress.dataset.grant, email_address: askAddress.elements.namedItem("email_address").value.trim() };
    const out = await perform("connect_mailbox_oauth", body);
    if (!out) return;
    askAddress.remove();
    notice(`${out.email_address} is connected; its mail is syncing.`);
    refresh();
  });
}
