// /mail: accounts and folders with unread counts, the message list (newest first, a page at a time), search,
// a thread with its messages, and changes to several messages at once. Everything comes from the operations:
// list_accounts, list_folders, list_labels, list_messages, search, get_thread, get_message, get_attachment,
// and for changes mark_read, mark_unread, set_pinned, add_labels, move_messages, trash_messages and
// restore_messages (through perform(), which shows the gate's proposal when a change needs confirmation).
// A message's HTML part is shown in a sandboxed frame of its own (/mail/messages/<id>/html: get_message_html,
// under a policy that runs no script), with remote images held back until the person asks for them. Opening a message marks it read with
// mark_read, because the person asked by opening it (unless they turned that off: get_preferences /
// set_preferences); reading it (get_message) never does. Writing (compose, reply, forward, drafts, signatures) is
// in mail-compose.js; a message's and a thread's summary in mail-summary.js.
// The list shows conversations (list_conversations: one row per thread) unless the person chose messages. Each
// folder and conversation has an address (/mail/<account>/<folder>, /mail/t/<thread>) kept in the history, so Back,
// Forward and reload work; while the page is visible it asks mailbox_counts every little while whether the open
// folder changed, and puts what came at the top of the list. Keyboard: j/k, o/Enter, e, #, r, a, f, /, Esc, ?.
// Archive, trash, move, label and read state offer Undo: the reverse operation, called when asked.
// Snooze (snooze_messages, unsnooze_messages) is on each message the reader opens. "Waiting for reply"
// (list_awaiting_reply) is listed under the views by mail-awaiting.js, and its threads shown here. Unsubscribe
// (the operation unsubscribe, which says which kind the message offers) is in mail-unsubscribe.js.
import { call, describeError, download, el, isAsking, notice, perform, shown, toast } from "../lib.js";
import * as composing from "./mail-compose.js";
import { appliedRules } from "./mail-rules.js";
import { unsubscribeBox, unsubscribeButton } from "./mail-unsubscribe.js";
import { messageSummary, threadSummary } from "./mail-summary.js";
import * as savedViews from "./mail-views.js";
import * as awaiting from "./mail-awaiting.js";
import * as aiLabels from "./mail-labels.js";

const FOLDER_NAMES = { inbox: "Inbox", archive: "Archive", spam: "Spam", trash: "Trash", sent: "Sent", drafts: "Drafts" };
const ORDER = ["inbox", "drafts", "sent", "archive", "spam", "trash"];

const accountsBox = document.getElementById("mail-accounts");
const listBox = document.getElementById("message-list");
const listView = document.getElementById("mail-list-view");
const listTitle = document.getElementById("list-title");
const more = document.getElementById("messages-more");
const reader = document.getElementById("reader");
const threadBox = document.getElementById("thread");
const threadTitle = document.getElementById("thread-title");
const threadSummaryBox = document.getElementById("thread-summary");
const bulk = document.getElementById("bulk");
const bulkCount = document.getElementById("bulk-count");
const bulkFolder = document.getElementById("bulk-folder");
const bulkLabel = document.getElementById("bulk-label");
const searchForm = document.getElementById("mail-search");
const searchClear = document.getElementById("search-clear");
const mailBox = document.getElementById("mail");
const keysDialog = document.getElementById("keys-dialog");
const viewButtons = [...document.querySelectorAll(".view-toggle button[data-view]")];

const state = {
  accounts: [],
  folders: {}, // account id -> folders
  labels: {}, // label id -> label
  account: null,
  folder: "inbox",
  query: null,
  cursor: null,
  view: "conversations", // or "messages"
  rows: new Map(), // row key (a message's id, or a conversation's thread id) -> { kind, item }
  selected: new Set(), // row keys
  thread: null, // the conversation open in the reader: { id, messages } (messages as get_thread gave them)
  current: null, // the message last opened in the reader (get_message's), for r, a and f
  markReadOnOpen: true,
  asked: 0,
};

const folderValue = (f) => (f.kind === "custom" ? f.name : f.kind);
const folderName = (f) => FOLDER_NAMES[f.kind] || f.name;
const senderOf = (m) => (m.sender ? m.sender.name || m.sender.address : "(no sender)");
const shortDate = (iso) => {
  if (!iso) return "";
  const d = new Date(iso);
  const today = new Date();
  return d.toDateString() === today.toDateString() ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) : d.toLocaleDateString();
};
const size = (n) => (n < 1024 ? `${n} bytes` : n < 1024 * 1024 ? `${Math.round(n / 1024)} KB` : `${(n / 1024 / 1024).toFixed(1)} MB`);
const address = (a) => (a.name ? `${a.name} <${a.address}>` : a.address);

// ------------------------------------------------------------ accounts and folders

// the accounts and labels (given: as the page brought them); the folders (with their counts) follow, while the
// first list is already on its way
async function loadAccounts(given) {
  try {
    const [accounts, labels] = given ? [given.accounts, given.labels] : await Promise.all([call("list_accounts", {}), call("list_labels", {})]);
    state.accounts = accounts.accounts;
    state.labels = Object.fromEntries(labels.labels.map((l) => [l.id, l]));
  } catch (err) {
    accountsBox.replaceChildren(el("p", { class: "errors" }, describeError(err)));
    return false;
  }
  if (!state.accounts.length) {
    accountsBox.replaceChildren(el("p", { class: "hint" }, "No mail accounts yet: connect one on the Mailboxes page."));
    listBox.replaceChildren(el("p", { class: "hint" }, "Nothing to show."));
    return false;
  }
  if (!state.account) state.account = state.accounts[0].id;
  // every mailbox's standard folders at once, their counts and own folders after (list_folders): the side keeps
  // its height while they load, so nothing below it moves (a layout shift)
  for (const a of state.accounts) {
    if (!state.folders[a.id]) state.folders[a.id] = ORDER.map((kind) => ({ kind, name: FOLDER_NAMES[kind], unread: 0 }));
  }
  renderAccounts();
  return true;
}

async function loadAllFolders() {
  try {
    await Promise.all(state.accounts.map(loadFolders));
  } catch (err) {
    accountsBox.replaceChildren(el("p", { class: "errors" }, describeError(err)));
    return;
  }
  renderAccounts();
  setTitle();
}

async function loadFolders(account) {
  const out = await call("list_folders", { account_id: account.id });
  state.folders[account.id] = out.folders.sort((a, b) => {
    const rank = (f) => (ORDER.includes(f.kind) ? ORDER.indexOf(f.kind) : ORDER.length);
    return rank(a) - rank(b) || a.name.localeCompare(b.name);
  });
}

function renderAccounts() {
  accountsBox.replaceChildren(
    ...state.accounts.map((a) =>
      el("div", { class: "mail-account", "data-account-id": a.id },
        el("h2", { class: "account-name" }, a.name),
        el("ul", {},
          (state.folders[a.id] || []).map((f) => {
            const current = !state.query && a.id === state.account && folderValue(f) === state.folder;
            return el("li", {},
              el("button", {
                type: "button",
                class: "folder",
                "data-folder": folderValue(f),
                "aria-current": current ? "true" : null,
                onclick: () => openFolder(a.id, folderValue(f), { push: true, reveal: true }),
              },
              el("span", {}, folderName(f)),
              f.unread ? el("span", { class: "unread-count", "aria-label": `${f.unread} unread` }, String(f.unread)) : null),
            );
          }),
        ),
      ),
    ),
  );
  const folders = (state.folders[state.account] || []).filter((f) => f.kind !== "trash" && f.kind !== "drafts");
  bulkFolder.replaceChildren(...folders.map((f) => el("option", { value: folderValue(f) }, folderName(f))));
  const labels = Object.values(state.labels).filter((l) => l.account_id === state.account);
  bulkLabel.replaceChildren(...labels.map((l) => el("option", { value: l.id }, l.name)));
  bulkLabel.closest(".bulk-move").hidden = !labels.length;
}

async function refreshCounts() {
  try {
    await Promise.all(state.accounts.map(loadFolders));
    renderAccounts();
  } catch (_) {
    /* the counts stay as they were */
  }
}

// ------------------------------------------------------------ the list: conversations or messages

function labelChips(m) {
  return m.label_ids.map((id) => state.labels[id]).filter(Boolean).map((l) => el("span", { class: "label-chip" }, l.name));
}

function selectBox(key, label) {
  const select = el("input", { type: "checkbox", class: "select", "aria-label": label });
  select.checked = state.selected.has(key);
  select.addEventListener("change", () => {
    if (select.checked) state.selected.add(key);
    else state.selected.delete(key);
    showBulk();
  });
  return select;
}

function messageRow(m, snippet) {
  const select = selectBox(m.id, `Select “${m.subject || "(no subject)"}” from ${senderOf(m)}`);
  return el("li", { class: `message${m.read ? "" : " unread"}${m.pinned ? " pinned" : ""}`, "data-message-id": m.id, "data-key": m.id },
    select,
    el("button", { type: "button", class: "open", onclick: () => openMessage(m) },
      el("span", { class: "sender", dir: "auto" }, senderOf(m)),
      el("span", { class: "subject", dir: "auto" }, m.subject || "(no subject)"),
      el("span", { class: "snippet", dir: "auto" }, snippet === undefined ? m.snippet : snippet),
    ),
    el("span", { class: "meta" },
      m.pinned ? el("span", { class: "pin", title: "Pinned" }, "★", el("span", { class: "visually-hidden" }, " pinned")) : null,
      m.has_attachments ? el("span", { class: "clip", title: "Has attachments" }, "attachment") : null,
      m.snoozed_until ? el("span", { class: "snoozed", title: `Snoozed until ${new Date(m.snoozed_until).toLocaleString()}` }, "snoozed") : null,
      m.read ? null : el("span", { class: "visually-hidden" }, "unread "),
      ...labelChips(m),
      el("time", { datetime: m.date || null }, shortDate(m.date)),
    ),
  );
}

const participantsOf = (c) => c.participants.map((p) => p.name || p.address).join(", ") || "(no sender)";

function conversationRow(c) {
  const select = selectBox(c.thread_id, `Select the conversation “${c.subject || "(no subject)"}” with ${participantsOf(c)}`);
  return el("li", { class: `conversation${c.unread_count ? " unread" : ""}${c.pinned ? " pinned" : ""}`, "data-thread-id": c.thread_id, "data-key": c.thread_id },
    select,
    el("button", { type: "button", class: "open", onclick: () => openThread(c.thread_id, { focus: c.latest_message_id, push: true }) },
      el("span", { class: "sender", dir: "auto" }, participantsOf(c),
        c.message_count > 1 ? el("span", { class: "count" }, ` ${c.message_count}`, el("span", { class: "visually-hidden" }, " messages")) : null),
      el("span", { class: "subject", dir: "auto" }, c.subject || "(no subject)"),
      el("span", { class: "snippet", dir: "auto" }, c.snippet),
    ),
    el("span", { class: "meta" },
      c.pinned ? el("span", { class: "pin", title: "Pinned" }, "★", el("span", { class: "visually-hidden" }, " pinned")) : null,
      c.has_attachments ? el("span", { class: "clip", title: "Has attachments" }, "attachment") : null,
      c.unread_count ? el("span", { class: "visually-hidden" }, `${c.unread_count} unread `) : null,
      ...labelChips(c),
      el("time", { datetime: c.date || null }, shortDate(c.date)),
    ),
  );
}

const rowOf = (entry, snippet) =>
  entry.kind === "awaiting" ? awaiting.row(entry.item, openThread)
    : entry.kind === "conversation" ? conversationRow(entry.item) : messageRow(entry.item, snippet);
const keyOf = (entry) => (entry.kind === "message" ? entry.item.id : entry.item.thread_id);

const list = el("ul", { class: "messages" });

// a page of the open listing (search aside), from `cursor` or the first: [entries, next cursor]
async function listingPage(cursor) {
  const body = { account_id: state.account, folder: state.folder };
  if (cursor) body.cursor = cursor;
  if (state.view === "conversations") {
    const out = await call("list_conversations", body);
    return [out.conversations.map((c) => ({ kind: "conversation", item: c })), out.next_cursor];
  }
  const out = await call("list_messages", body);
  return [out.messages.map((m) => ({ kind: "message", item: m })), out.next_cursor];
}

async function loadMessages() {
  more.disabled = true;
  const asked = ++state.asked; // a newer list asked for meanwhile (another folder, a search) wins
  try {
    let rows;
    let next;
    if (state.query && state.listsWith === "list_awaiting_reply") {
      // the conversations waiting for reply (mail-awaiting.js): the person's number of days, newest first
      const out = await call("list_awaiting_reply", state.cursor ? { cursor: state.cursor } : {});
      rows = out.threads.map((t) => [{ kind: "awaiting", item: t }, undefined]);
      next = out.next_cursor;
    } else if (state.query && state.listsWith === "list_messages") {
      // a saved view without words (mail-views.js): its messages, newest first
      const body = { ...state.query };
      if (state.cursor) body.cursor = state.cursor;
      const out = await call("list_messages", body);
      rows = out.messages.map((m) => [{ kind: "message", item: m }, undefined]);
      next = out.next_cursor;
    } else if (state.query) {
      const body = { ...state.query };
      if (state.cursor) body.cursor = state.cursor;
      const out = await call("search", body);
      rows = out.hits.map((h) => [{ kind: "message", item: h.message }, h.highlight]);
      next = out.next_cursor;
    } else {
      const [entries, after] = await listingPage(state.cursor);
      rows = entries.map((e) => [e, undefined]);
      next = after;
    }
    if (asked !== state.asked) return;
    showRows(rows, next);
  } catch (err) {
    if (asked !== state.asked) return;
    listBox.replaceChildren(el("p", { class: "errors" }, describeError(err)));
    more.hidden = true;
  } finally {
    more.disabled = false;
  }
}

// a page of rows ([entry, highlighted snippet or undefined]) after those shown, or in their place for a first page
function showRows(rows, next) {
  if (!state.cursor) {
    list.replaceChildren();
    listBox.replaceChildren(list);
  }
  for (const [entry, snippet] of rows) {
    state.rows.set(keyOf(entry), entry);
    list.append(rowOf(entry, snippet));
  }
  const none = state.listsWith === "list_awaiting_reply" && state.query ? "No conversation waits for a reply." : state.query ? "Nothing matches." : "No messages here.";
  if (!list.children.length) listBox.replaceChildren(el("p", { class: "hint" }, none));
  // when the first list was on the screen, measured from the navigation (bench/console.py reads it)
  if (!performance.getEntriesByName("oaken:first-list").length) performance.mark("oaken:first-list");
  state.cursor = next;
  more.hidden = !next;
}

function resetList() {
  state.cursor = null;
  state.rows.clear();
  state.selected.clear();
  showBulk();
  return loadMessages();
}

function currentFolder() {
  return (state.folders[state.account] || []).find((f) => folderValue(f) === state.folder);
}

function setTitle() {
  if (state.query) return;
  const account = state.accounts.find((a) => a.id === state.account);
  const f = currentFolder();
  const name = f ? folderName(f) : FOLDER_NAMES[state.folder] || state.folder;
  listTitle.textContent = `${name}${state.accounts.length > 1 && account ? ` · ${account.name}` : ""}`;
}

// ------------------------------------------------------------ addresses: /mail/<account>/<folder>, /mail/t/<thread>

const folderPath = (account, folder) => `/mail/${encodeURIComponent(account)}/${folder.split("/").map(encodeURIComponent).join("/")}`;
const threadPath = (thread) => `/mail/t/${encodeURIComponent(thread)}`;

// what the address names: { thread } or { account, folder } or null (/mail: the page chooses)
function addressed() {
  const parts = location.pathname.split("/").slice(2).filter((p, i, all) => p || i < all.length - 1);
  try {
    if (parts[0] === "t" && parts.length === 2) return { thread: decodeURIComponent(parts[1]) };
    if (parts.length >= 2 && parts[0] !== "messages") return { account: decodeURIComponent(parts[0]), folder: parts.slice(1).map(decodeURIComponent).join("/") };
  } catch (_) {
    return null;
  }
  const asked = new URLSearchParams(location.search);
  return asked.get("account") ? { account: asked.get("account"), folder: asked.get("folder") || "inbox" } : null;
}

function go(path, entry) {
  if (location.pathname !== path) history.pushState(entry, "", path);
  else history.replaceState(entry, "");
}

async function openFolder(accountId, folder, how = {}) {
  if (!(await composing.leave())) return;
  state.account = accountId;
  state.folder = folder;
  remember();
  if (how.push) go(folderPath(accountId, folder), { account: accountId, folder });
  state.query = null;
  savedViews.searched(null);
  awaiting.shown(false);
  searchForm.reset();
  searchClear.hidden = true;
  setTitle();
  closeReader();
  renderAccounts();
  // on a phone the folders are above the list: the list the person chose comes into view
  if (how.reveal && window.matchMedia("(max-width: 50rem)").matches) listView.scrollIntoView({ block: "start" });
  return resetList();
}

function setView(view) {
  state.view = view;
  for (const b of viewButtons) b.setAttribute("aria-pressed", String(b.dataset.view === view));
  const secure = location.protocol === "https:" ? "; Secure" : "";
  document.cookie = `${VIEW}=${view}; Path=/mail; Max-Age=31536000; SameSite=Lax${secure}`;
}
for (const b of viewButtons) {
  b.addEventListener("click", () => {
    if (state.view === b.dataset.view) return;
    setView(b.dataset.view);
    if (!state.query) resetList();
  });
}

// the search's words and the filters set (the search operation's own inputs; days in the person's time zone)
function searchInput() {
  const data = new FormData(searchForm);
  const query = (data.get("query") || "").trim();
  if (!query) return null;
  const body = { query, mode: data.get("mode") || "hybrid", tz: Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC" };
  for (const key of ["from", "to", "after", "before"]) {
    const value = (data.get(key) || "").trim();
    if (value) body[key] = value;
  }
  for (const key of ["unread", "has_attachment"]) {
    if (data.get(key)) body[key] = data.get(key) === "true";
  }
  return body;
}

searchForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  const query = searchInput();
  if (!query || !(await composing.leave())) return;
  state.query = query;
  state.listsWith = "search";
  savedViews.searched(query);
  awaiting.shown(false);
  listTitle.textContent = `Search: ${query.query}`;
  searchClear.hidden = false;
  closeReader();
  renderAccounts();
  resetList();
});
searchClear.addEventListener("click", () => openFolder(state.account, state.folder));

// a saved view (mail-views.js lists them with their counts): searched, or listed when it has no words
async function openView(v) {
  if (!(await composing.leave())) return false;
  awaiting.shown(false);
  state.query = { view_id: v.id };
  state.listsWith = v.lists_with;
  showListOf(`View: ${v.name}`);
  return true;
}

// a list that is not a folder's (a view, the conversations waiting for reply): titled, shown, read from the top
function showListOf(title) {
  searchForm.reset();
  listTitle.textContent = title;
  searchClear.hidden = false;
  closeReader();
  renderAccounts();
  if (window.matchMedia("(max-width: 50rem)").matches) listView.scrollIntoView({ block: "start" });
  resetList();
}

// the conversations waiting for reply (mail-awaiting.js lists the entry with their count)
async function openAwaiting() {
  if (!(await composing.leave())) return false;
  state.query = { awaiting: true };
  state.listsWith = "list_awaiting_reply";
  savedViews.searched(null);
  showListOf("Waiting for reply");
  return true;
}
more.addEventListener("click", loadMessages);

// ------------------------------------------------------------ several messages at once, and Undo

function showBulk() {
  const n = state.selected.size;
  bulk.hidden = n === 0;
  bulkCount.textContent = n === 1 ? "1 selected" : `${n} selected`;
}

// the messages a change to these rows changes, each with what the reverse needs: its folder, read state, labels
function messagesOf(keys) {
  const found = [];
  for (const key of keys) {
    const entry = state.rows.get(key);
    if (!entry || entry.kind === "awaiting") continue;
    if (entry.kind === "message") {
      const m = entry.item;
      found.push({ id: m.id, folder: m.folder, read: m.read, labels: m.label_ids });
    } else {
      const c = entry.item;
      for (const id of c.message_ids) {
        found.push({ id, folder: state.folder, read: c.unread_count === 0 ? true : c.unread_count === c.message_count ? false : null, labels: c.label_ids });
      }
    }
  }
  return found;
}

// the reverse of a change to `before` (messagesOf's), as [operation, input] calls; [] when there is none
function reverse(kind, before, extra) {
  const ids = (pick) => before.filter(pick).map((m) => m.id);
  const some = (op, message_ids, more) => (message_ids.length ? [[op, { message_ids, ...more }]] : []);
  switch (kind) {
    case "move": {
      const back = new Map();
      for (const m of before) back.set(m.folder, [...(back.get(m.folder) || []), m.id]);
      return [...back].map(([folder, message_ids]) => ["move_messages", { message_ids, folder }]);
    }
    case "trash":
      return some("restore_messages", ids(() => true));
    case "restore":
      return some("trash_messages", ids(() => true));
    case "read":
      return some("mark_unread", ids((m) => m.read !== true));
    case "unread":
      return some("mark_read", ids((m) => m.read !== false));
    case "label":
      return some("remove_labels", ids((m) => !m.labels.includes(extra)), { label_ids: [extra] });
    case "unlabel":
      return some("add_labels", ids((m) => m.labels.includes(extra)), { label_ids: [extra] });
    default:
      return [];
  }
}

// A change to the messages of `keys` (or `before`, given): done, then a toast offering the reverse.
async function change(kind, op, body, done, before) {
  const out = await perform(op, body, done);
  if (!out) return null;
  const undo = reverse(kind, before, body.label_ids ? body.label_ids[0] : null);
  if (undo.length) {
    toast(done, "Undo", async () => {
      for (const [undoOp, input] of undo) {
        if (!(await perform(undoOp, input, "Undone."))) break;
      }
      await Promise.all([resetList(), refreshCounts()]);
    });
  }
  return out;
}

const BULK = {
  read: (ids) => ["read", "mark_read", { message_ids: ids }, "Marked read."],
  unread: (ids) => ["unread", "mark_unread", { message_ids: ids }, "Marked unread."],
  pin: (ids) => ["pin", "set_pinned", { message_ids: ids, pinned: true }, "Pinned."],
  unpin: (ids) => ["unpin", "set_pinned", { message_ids: ids, pinned: false }, "Unpinned."],
  label: (ids) => ["label", "add_labels", { message_ids: ids, label_ids: [bulkLabel.value] }, "Labelled."],
  unlabel: (ids) => ["unlabel", "remove_labels", { message_ids: ids, label_ids: [bulkLabel.value] }, "Label removed."],
  move: (ids) => ["move", "move_messages", { message_ids: ids, folder: bulkFolder.value }, "Moved."],
  trash: (ids) => ["trash", "trash_messages", { message_ids: ids }, "Moved to the trash."],
  restore: (ids) => ["restore", "restore_messages", { message_ids: ids }, "Restored."],
};

async function changeRows(name, keys) {
  const before = messagesOf(keys);
  if (!before.length) return;
  const [kind, op, body, done] = BULK[name](before.map((m) => m.id));
  if (await change(kind, op, body, done, before)) {
    await Promise.all([resetList(), refreshCounts()]);
  }
}

for (const button of bulk.querySelectorAll("button[data-bulk]")) {
  button.addEventListener("click", () => changeRows(button.dataset.bulk, [...state.selected]));
}

// ------------------------------------------------------------ reading a thread

function closeReader() {
  const was = reader.hidden ? null : state.thread && state.thread.id;
  reader.hidden = true;
  listView.hidden = false;
  threadBox.replaceChildren();
  threadSummaryBox.replaceChildren();
  state.thread = null;
  state.current = null;
  // the row the conversation was opened from has the focus again
  const row = was && (list.querySelector(`li[data-thread-id="${CSS.escape(was)}"]`) ||
    list.querySelector(`li[data-message-id="${CSS.escape(reader.dataset.opened || "")}"]`));
  if (row) setCursor(row);
}

// Back to the list: the history's own Back when the list is the entry before, else the list's address
function backToList() {
  if (reader.hidden) return;
  if (history.state && history.state.thread && history.state.fromList) {
    history.back();
    return;
  }
  go(folderPath(state.account, state.folder), { account: state.account, folder: state.folder });
  closeReader();
}
document.getElementById("reader-back").addEventListener("click", backToList);

const downloadFile = (attachment) => download("get_attachment", { attachment_id: attachment.id });

function htmlPart(m) {
  const frame = el("iframe", {
    class: "message-html",
    title: `The message “${m.subject || "(no subject)"}” as its sender formatted it`,
    sandbox: "allow-popups allow-popups-to-escape-sandbox",
    referrerpolicy: "no-referrer",
    src: `/mail/messages/${encodeURIComponent(m.id)}/html`,
  });
  const images = el("button", { type: "button", class: "show-images" }, "Show remote images");
  images.addEventListener("click", () => {
    frame.src = `/mail/messages/${encodeURIComponent(m.id)}/html?remote_images=1`;
    images.disabled = true;
    images.textContent = "Remote images shown";
  });
  return el("div", { class: "html-part" },
    el("p", { class: "hint" }, "Remote images are held back: loading one tells the sender you opened this message. ", images),
    frame,
  );
}

async function expand(article, summary) {
  const body = article.querySelector(".message-body");
  const toggle = article.querySelector("button.message-toggle");
  toggle.setAttribute("aria-expanded", "true");
  body.hidden = false;
  if (body.dataset.loaded) return;
  body.dataset.loaded = "1";
  body.replaceChildren(el("p", { class: "hint" }, "Loading…"));
  let m;
  try {
    m = (await call("get_message", { message_id: summary.id })).message;
  } catch (err) {
    body.replaceChildren(el("p", { class: "errors" }, describeError(err)));
    return;
  }
  const unsubscribing = unsubscribeBox(m); // what Unsubscribe answered (mail-unsubscribe.js)
  const parts = [
    el("div", { class: "message-actions row-actions" },
      el("button", { type: "button", class: "reply", onclick: () => composing.reply(m, false) }, "Reply"),
      el("button", { type: "button", class: "reply-all", onclick: () => composing.reply(m, true) }, "Reply all"),
      el("button", { type: "button", class: "forward", onclick: () => composing.forward(m) }, "Forward"),
      snoozeButton(m),
      unsubscribeButton(m, unsubscribing),
    ),
    snoozePanel(m),
    unsubscribing,
    el("dl", { class: "headers" },
      el("dt", {}, "From"), el("dd", { dir: "auto" }, m.sender ? address(m.sender) : "—"),
      el("dt", {}, "To"), el("dd", { dir: "auto" }, m.to.map(address).join(", ") || "—"),
      m.cc.length ? [el("dt", {}, "Cc"), el("dd", { dir: "auto" }, m.cc.map(address).join(", "))] : null,
      el("dt", {}, "Date"), el("dd", {}, m.date ? new Date(m.date).toLocaleString() : "—"),
    ),
    messageSummary(m),
    ...[appliedRules(m)].filter(Boolean), // why rules acted on it (mail-rules.js)
    aiLabels.why(m.id, summary.label_ids),
  ];
  const text = el("pre", { class: "message-text" }, m.text, m.truncated ? `\n\n[… cut: ${m.text_length} characters in all]` : "");
  if (m.has_html) {
    parts.push(htmlPart(m), el("details", { class: "text-part" }, el("summary", {}, "Text part"), text));
  } else {
    parts.push(text);
  }
  if (m.attachments.length) {
    parts.push(
      el("h4", {}, "Attachments"),
      el("ul", { class: "attachments" },
        m.attachments.map((a) =>
          el("li", { "data-attachment-id": a.id },
            el("button", { type: "button", onclick: () => downloadFile(a), "aria-label": `Download ${a.filename}` },
              el("bdi", { class: "filename" }, a.filename || "(unnamed)"),
            ),
            el("span", { class: "hint" }, ` ${a.content_type}, ${size(a.size)}`),
          ),
        ),
      ),
    );
    if (m.attachments_truncated) {
      parts.push(el("p", { class: "hint attachments-cut" }, `The first ${m.attachments.length} of ${m.attachment_count} attachments.`));
    }
  }
  body.replaceChildren(...parts);
  state.current = m;
}

// ------------------------------------------------------------ snooze: snooze_messages, unsnooze_messages
// A message's Snooze asks for a time in the person's own time zone (sent as `until` with `tz`: the operation reads
// it, and says whether it is too soon or too far); a snoozed message says until when, and offers Unsnooze.

const localZone = () => Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
const pad = (n) => String(n).padStart(2, "0");

function tomorrowMorning() {
  const d = new Date();
  d.setDate(d.getDate() + 1);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T08:00`;
}

async function snoozed(op, body, done) {
  if (!(await perform(op, body, done))) return;
  await Promise.all([resetList(), refreshCounts()]);
  backToList();
}

function snoozeButton(m) {
  if (m.snoozed_until) {
    return el("button", { type: "button", class: "unsnooze",
      onclick: () => snoozed("unsnooze_messages", { message_ids: [m.id] }, "Back in the inbox.") }, "Unsnooze");
  }
  return el("button", { type: "button", class: "snooze-open", "aria-expanded": "false", "aria-controls": `snooze-${m.id}`,
    onclick: (event) => {
      const panel = document.getElementById(`snooze-${m.id}`);
      panel.hidden = !panel.hidden;
      event.currentTarget.setAttribute("aria-expanded", String(!panel.hidden));
      if (!panel.hidden) panel.querySelector("input").focus();
    } }, "Snooze");
}

function snoozePanel(m) {
  if (m.snoozed_until) {
    return el("p", { class: "hint snoozed-until" }, `Snoozed until ${new Date(m.snoozed_until).toLocaleString()}.`);
  }
  const input = el("input", { type: "datetime-local", id: `snooze-until-${m.id}`, value: tomorrowMorning(), required: true });
  const form = el("form", { class: "snooze-form row-actions", id: `snooze-${m.id}`, hidden: true },
    el("label", { for: input.id }, "Back in the inbox, unread, at"), input,
    el("button", { type: "submit" }, "Snooze"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    snoozed("snooze_messages", { message_ids: [m.id], until: input.value, tz: localZone() }, "Snoozed.");
  });
  return form;
}

function threadMessage(m, opened) {
  const body = el("div", { class: "message-body", hidden: true });
  const toggle = el("button", { type: "button", class: "message-toggle", "aria-expanded": "false" },
    el("span", { class: "sender", dir: "auto" }, senderOf(m)),
    el("span", { class: "snippet", dir: "auto" }, m.snippet),
    el("time", { datetime: m.date || null }, m.date ? new Date(m.date).toLocaleString() : ""),
  );
  const article = el("article", { class: `thread-message${opened ? " opened" : ""}`, "data-message-id": m.id }, el("h3", {}, toggle), body);
  toggle.addEventListener("click", () => {
    if (body.hidden) expand(article, m);
    else {
      body.hidden = true;
      toggle.setAttribute("aria-expanded", "false");
    }
  });
  return article;
}

function openMessage(m) {
  return openThread(m.thread_id, { focus: m.id, push: true, title: m.subject });
}

// Opens the conversation `threadId` in the reader (its message `focus`, else its newest, expanded), from the list
// (push: a new entry in the history), from the history or the address (given: get_thread's answer, if brought).
async function openThread(threadId, how = {}) {
  if (!(await composing.leave())) return;
  if (how.push) go(threadPath(threadId), { thread: threadId, fromList: true, account: state.account, folder: state.folder });
  listView.hidden = true;
  reader.hidden = false;
  state.thread = { id: threadId, messages: [] };
  state.current = null;
  reader.dataset.opened = how.focus || "";
  threadTitle.textContent = shown(how.title || "");
  threadTitle.dir = "auto";
  threadSummaryBox.replaceChildren(threadSummary({ id: threadId }));
  threadBox.replaceChildren(el("p", { class: "hint" }, "Loading…"));
  let thread = how.given;
  if (!thread) {
    try {
      thread = await call("get_thread", { thread_id: threadId });
    } catch (err) {
      threadBox.replaceChildren(el("p", { class: "errors" }, describeError(err)));
      return;
    }
  }
  if (!state.thread || state.thread.id !== threadId) return; // another was opened meanwhile
  state.thread.messages = thread.messages;
  if (!how.title) threadTitle.textContent = shown(thread.thread.subject || "(no subject)");
  const focus = how.focus || (thread.messages.length ? thread.messages[thread.messages.length - 1].id : null);
  reader.dataset.opened = focus || "";
  const articles = thread.messages.map((t) => [t, threadMessage(t, t.id === focus)]);
  threadBox.replaceChildren(
    ...articles.map(([, a]) => a),
    thread.truncated ? el("p", { class: "hint" }, `This thread holds ${thread.thread.message_count} messages; the first ${thread.messages.length} are shown.`) : "",
  );
  const opened = articles.find(([t]) => t.id === focus);
  if (opened) {
    await expand(opened[1], opened[0]);
    opened[1].scrollIntoView({ block: "nearest" });
  }
  threadTitle.focus?.();
  // the message opened is read: the person asked by opening it
  if (!opened || opened[0].read) return;
  if (state.markReadOnOpen) await markRead([opened[0]]);
  else {
    const button = el("button", { type: "button", class: "mark-read" }, "Mark read");
    button.addEventListener("click", async () => {
      if (await markRead([opened[0]])) button.remove();
    });
    opened[1].querySelector(".message-body").prepend(button);
  }
}

// the person opened it (or asked): mark_read, audited as theirs
async function markRead(messages) {
  const out = await perform("mark_read", { message_ids: messages.map((m) => m.id) });
  if (!out) return false;
  for (const m of messages) {
    m.read = true;
    const entry = state.rows.get(m.id) || state.rows.get(m.thread_id);
    if (!entry || entry.kind === "awaiting") continue;
    if (entry.kind === "message") entry.item.read = true;
    else entry.item.unread_count = Math.max(0, entry.item.unread_count - 1);
    const row = list.querySelector(`li[data-key="${CSS.escape(keyOf(entry))}"]`);
    if (row) row.replaceWith(rowOf(entry));
  }
  refreshCounts();
  return true;
}

// the person's own preference: whether opening a message marks it read
const preference = document.getElementById("pref-mark-read");
async function loadPreference() {
  try {
    state.markReadOnOpen = (await call("get_preferences", {})).mark_read_on_open;
    preference.checked = state.markReadOnOpen;
    preference.disabled = false;
  } catch (_) {
    preference.closest("label").hidden = true; // opening still marks read, as by default
  }
}
preference.addEventListener("change", async () => {
  const out = await perform("set_preferences", { mark_read_on_open: preference.checked });
  if (out) {
    state.markReadOnOpen = out.mark_read_on_open;
    notice(out.mark_read_on_open ? "Opening a message marks it read." : "Opening a message leaves it unread.");
  }
  preference.checked = state.markReadOnOpen;
});

threadTitle.tabIndex = -1;

// ------------------------------------------------------------ start

// The folder last opened here (this browser, this tenant) is asked for at once, beside the accounts: a person
// comes back to where they were without waiting for one more answer first. An account that is gone (or never
// was the tenant's) answers NOT_FOUND like any other, and the first account's inbox is shown instead.
// the folder shown last, for this tenant in this browser: a cookie, so that the server opens the page on it
// (apps.console.views.first_screen); each part URI-encoded, as it reads them
const LAST = `oaken_mail_last_${document.querySelector("main").dataset.tenant || ""}`;
const remember = () => {
  const value = `${encodeURIComponent(state.account)}/${encodeURIComponent(state.folder)}`;
  const secure = location.protocol === "https:" ? "; Secure" : "";
  document.cookie = `${LAST}=${value}; Path=/mail; Max-Age=31536000; SameSite=Lax${secure}`;
};
const remembered = () => {
  const found = document.cookie.split("; ").find((c) => c.startsWith(`${LAST}=`));
  if (!found) return null;
  const [account, folder] = found.slice(LAST.length + 1).split("/");
  try {
    return account && folder ? { account: decodeURIComponent(account), folder: decodeURIComponent(folder) } : null;
  } catch (_) {
    return null;
  }
};

// the list's view chosen here (conversations or messages), for this tenant in this browser: a cookie the server
// reads too (apps.console.views.list_view)
const VIEW = `oaken_mail_view_${document.querySelector("main").dataset.tenant || ""}`;
const chosenView = () => {
  const found = document.cookie.split("; ").find((c) => c.startsWith(`${VIEW}=`));
  return found && found.slice(VIEW.length + 1) === "messages" ? "messages" : "conversations";
};

// ------------------------------------------------------------ the keyboard

// the row j and k move to: marked, and focused (its open button), so Enter and o open it
function setCursor(row) {
  for (const r of list.querySelectorAll("li[data-cursor]")) r.removeAttribute("data-cursor");
  if (!row) return;
  row.dataset.cursor = "true";
  const open = row.querySelector("button.open");
  if (open) open.focus();
}

function moveCursor(step) {
  const rows = [...list.querySelectorAll("li[data-key]")];
  if (!rows.length) return;
  const at = rows.findIndex((r) => r.dataset.cursor || r.contains(document.activeElement));
  const next = at < 0 ? 0 : Math.min(rows.length - 1, Math.max(0, at + step));
  setCursor(rows[next]);
  rows[next].scrollIntoView({ block: "nearest" });
}

const cursorRow = () => list.querySelector("li[data-cursor]") || document.activeElement?.closest?.("#message-list li[data-key]");

// archive (e) or trash (#): the conversation open, else the selected rows, else the row at the cursor
async function putAway(kind) {
  if (!reader.hidden && state.thread) {
    const keep = kind === "archive" ? ["archive", "sent", "drafts", "trash"] : ["trash"];
    const before = state.thread.messages.filter((m) => !keep.includes(m.folder)).map((m) => ({ id: m.id, folder: m.folder, read: m.read, labels: m.label_ids }));
    if (!before.length) return;
    const ids = before.map((m) => m.id);
    const done = await (kind === "archive"
      ? change("move", "move_messages", { message_ids: ids, folder: "archive" }, "Archived.", before)
      : change("trash", "trash_messages", { message_ids: ids }, "Moved to the trash.", before));
    if (done) {
      backToList();
      await Promise.all([resetList(), refreshCounts()]);
    }
    return;
  }
  const row = cursorRow();
  const keys = state.selected.size ? [...state.selected] : row ? [row.dataset.key] : [];
  if (!keys.length) return;
  const before = messagesOf(keys);
  if (!before.length) return;
  const ids = before.map((m) => m.id);
  const next = row && (row.nextElementSibling || row.previousElementSibling);
  const nextKey = next && next.dataset.key;
  const done = await (kind === "archive"
    ? change("move", "move_messages", { message_ids: ids, folder: "archive" }, "Archived.", before)
    : change("trash", "trash_messages", { message_ids: ids }, "Moved to the trash.", before));
  if (!done) return;
  await Promise.all([resetList(), refreshCounts()]);
  const again = nextKey && list.querySelector(`li[data-key="${CSS.escape(nextKey)}"]`);
  setCursor(again || list.querySelector("li[data-key]"));
}

function typing(target) {
  if (!target || !target.closest) return false;
  return Boolean(target.closest("input, textarea, select, [contenteditable=''], [contenteditable='true']"));
}

function showKeys() {
  if (!keysDialog.open) keysDialog.showModal();
}
document.getElementById("keys-open").addEventListener("click", showKeys);
document.getElementById("keys-close").addEventListener("click", () => keysDialog.close());

document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target) || isAsking()) return;
  const drafting = !document.getElementById("composer").hidden || !document.getElementById("drafts-view").hidden;
  if (drafting) return;
  const inList = !listView.hidden;
  const key = event.key;
  const act = (fn) => {
    event.preventDefault();
    fn();
  };
  if (key === "?") return act(showKeys);
  if (key === "/") return act(() => document.getElementById("search-query").focus());
  if (key === "Escape" && !reader.hidden) return act(backToList);
  if (key === "e") return act(() => putAway("archive"));
  if (key === "#") return act(() => putAway("trash"));
  if (inList) {
    if (key === "j") return act(() => moveCursor(1));
    if (key === "k") return act(() => moveCursor(-1));
    if (key === "o" || (key === "Enter" && event.target === document.body)) {
      const row = cursorRow();
      if (row) act(() => row.querySelector("button.open").click());
    }
    return;
  }
  if (state.current && (key === "r" || key === "a" || key === "f")) {
    const m = state.current;
    return act(() => (key === "f" ? composing.forward(m) : composing.reply(m, key === "a")));
  }
});

// ------------------------------------------------------------ the history: Back, Forward

window.addEventListener("popstate", async (event) => {
  const entry = event.state || addressed() || { account: state.account, folder: state.folder };
  if (entry.thread) {
    await openThread(entry.thread, {});
    return;
  }
  if (entry.list || (entry.account === state.account && entry.folder === state.folder && !state.query && state.rows.size)) {
    closeReader();
    return;
  }
  if (entry.account) await openFolder(entry.account, entry.folder || "inbox");
});

// ------------------------------------------------------------ new mail without a reload

// While the page is visible, every little while: mailbox_counts of the open account (one cheap read, audited as
// the console's own), and only when the open folder's counts moved, its first page again, whose new rows go on top
// (what is selected, and where the list is scrolled, stay).
const POLL_MS = Math.max(1, Number(mailBox.dataset.pollSeconds) || 20) * 1000;
let polling = null;

async function poll() {
  if (document.visibilityState !== "visible" || state.query || !state.account) return;
  let counts;
  try {
    counts = await call("mailbox_counts", { account_id: state.account });
  } catch (_) {
    return; // asked again next time
  }
  const account = counts.accounts.find((a) => a.account_id === state.account);
  const open = account && account.folders.find((f) => f.folder === state.folder);
  if (!open) return;
  // the folder's counts as the page shows them (list_folders, read with the list and after each change): when they
  // are the same, nothing came
  const counted = currentFolder();
  if (counted && counted.total === open.total && counted.unread === open.unread) return;
  refreshCounts();
  const asked = state.asked;
  let entries;
  try {
    [entries] = await listingPage(null);
  } catch (_) {
    return;
  }
  if (asked !== state.asked || state.query) return; // the person moved on meanwhile
  const height = document.documentElement.scrollHeight;
  const fresh = [];
  for (const entry of entries) {
    const key = keyOf(entry);
    const old = list.querySelector(`li[data-key="${CSS.escape(key)}"]`);
    const known = state.rows.get(key);
    state.rows.set(key, entry);
    if (old && known && JSON.stringify(known.item) === JSON.stringify(entry.item)) continue;
    // a row that changed in place (read, labelled) stays where it is; a new one, or a conversation with a newer
    // message, goes on top
    if (old && !(entry.kind === "conversation" && known && known.item.date !== entry.item.date)) {
      old.replaceWith(rowOf(entry));
      continue;
    }
    if (old) old.remove();
    fresh.push(rowOf(entry));
  }
  if (!fresh.length) return;
  if (!list.isConnected) listBox.replaceChildren(list);
  list.prepend(...fresh);
  if (window.scrollY > 0) window.scrollBy(0, document.documentElement.scrollHeight - height);
}

function startPolling() {
  if (polling === null && document.visibilityState === "visible") polling = setInterval(poll, POLL_MS);
}
function stopPolling() {
  if (polling !== null) clearInterval(polling);
  polling = null;
}
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "visible") {
    startPolling();
    poll();
  } else stopPolling();
});

// ------------------------------------------------------------ start

// what the server read for the first screen (the same operations, through the gate), or null: then it is asked
const given = (() => {
  const node = document.getElementById("mail-first");
  try {
    return node ? JSON.parse(node.textContent) : null;
  } catch (_) {
    return null;
  }
})();

const pageOf = (listing) =>
  listing.view === "conversations" || listing.page.conversations
    ? listing.page.conversations.map((c) => [{ kind: "conversation", item: c }, undefined])
    : listing.page.messages.map((m) => [{ kind: "message", item: m }, undefined]);

// That list goes first and alone: the server answers it before the side's accounts, labels, folder counts and
// preferences, which follow at once (the rows' label chips are added when the labels are in).
// When the server brought the list the page opens on, it shows at once, and the rest follows.
async function listFirst() {
  const named = addressed();
  const last = named && named.account ? named : remembered();
  const listing = given && given.listing;
  if (listing && (listing.view || "messages") === state.view && (!last || (last.account === listing.account_id && last.folder === listing.folder))) {
    state.account = listing.account_id;
    state.folder = listing.folder;
    state.labels = Object.fromEntries(given.labels.labels.map((l) => [l.id, l]));
    showRows(pageOf(listing), listing.page.next_cursor);
    loadPreference();
    if (!(await loadAccounts(given))) return;
    composing.start(state.accounts);
    savedViews.start(openView);
    awaiting.start(openAwaiting);
    aiLabels.start(state.accounts, Object.values(state.labels));
    await loadAllFolders();
    return;
  }
  if (last) {
    state.account = last.account;
    state.folder = last.folder;
    await resetList();
  }
  loadPreference();
  if (!(await loadAccounts(given))) return;
  composing.start(state.accounts);
  savedViews.start(openView);
  awaiting.start(openAwaiting);
  aiLabels.start(state.accounts, Object.values(state.labels));
  if (last && state.accounts.some((a) => a.id === state.account)) {
    for (const row of list.querySelectorAll("li[data-key]")) {
      const entry = state.rows.get(row.dataset.key);
      if (entry && entry.item.label_ids.length) row.querySelector(".meta time").before(...labelChips(entry.item));
    }
    await loadAllFolders();
    return;
  }
  state.account = state.accounts[0].id;
  state.folder = "inbox";
  remember();
  setTitle();
  await Promise.all([resetList(), loadAllFolders()]);
}

(async () => {
  setView(chosenView());
  const named = addressed();
  // this entry of the history: the conversation the address names, else the list (whichever folder it shows)
  history.replaceState(named && named.thread ? { thread: named.thread } : { list: true }, "");
  const listed = listFirst();
  if (named && named.thread) {
    const thread = given && given.thread && given.thread.thread.id === named.thread ? given.thread : null;
    await openThread(named.thread, { given: thread });
  }
  await listed;
  startPolling();

})();
