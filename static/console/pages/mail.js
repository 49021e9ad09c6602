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
import { call, describeError, download, el, notice, perform, shown } from "../lib.js";
import * as composing from "./mail-compose.js";
import { messageSummary, threadSummary } from "./mail-summary.js";

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

const state = {
  accounts: [],
  folders: {}, // account id -> folders
  labels: {}, // label id -> label
  account: null,
  folder: "inbox",
  query: null,
  cursor: null,
  rows: new Map(), // message id -> summary shown
  selected: new Set(),
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
                onclick: () => openFolder(a.id, folderValue(f)),
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

// ------------------------------------------------------------ the message list

function labelChips(m) {
  return m.label_ids.map((id) => state.labels[id]).filter(Boolean).map((l) => el("span", { class: "label-chip" }, l.name));
}

function messageRow(m, snippet) {
  const select = el("input", { type: "checkbox", class: "select", "aria-label": `Select “${m.subject || "(no subject)"}” from ${senderOf(m)}` });
  select.checked = state.selected.has(m.id);
  select.addEventListener("change", () => {
    if (select.checked) state.selected.add(m.id);
    else state.selected.delete(m.id);
    showBulk();
  });
  return el("li", { class: `message${m.read ? "" : " unread"}${m.pinned ? " pinned" : ""}`, "data-message-id": m.id },
    select,
    el("button", { type: "button", class: "open", onclick: () => openMessage(m) },
      el("span", { class: "sender", dir: "auto" }, senderOf(m)),
      el("span", { class: "subject", dir: "auto" }, m.subject || "(no subject)"),
      el("span", { class: "snippet", dir: "auto" }, snippet === undefined ? m.snippet : snippet),
    ),
    el("span", { class: "meta" },
      m.pinned ? el("span", { class: "pin", title: "Pinned" }, "★", el("span", { class: "visually-hidden" }, " pinned")) : null,
      m.has_attachments ? el("span", { class: "clip", title: "Has attachments" }, "attachment") : null,
      m.read ? null : el("span", { class: "visually-hidden" }, "unread "),
      ...labelChips(m),
      el("time", { datetime: m.date || null }, shortDate(m.date)),
    ),
  );
}

const list = el("ul", { class: "messages" });

async function loadMessages() {
  more.disabled = true;
  const asked = ++state.asked; // a newer list asked for meanwhile (another folder, a search) wins
  try {
    let rows;
    let next;
    if (state.query) {
      const body = { ...state.query };
      if (state.cursor) body.cursor = state.cursor;
      const out = await call("search", body);
      rows = out.hits.map((h) => [h.message, h.highlight]);
      next = out.next_cursor;
    } else {
      const body = { account_id: state.account, folder: state.folder };
      if (state.cursor) body.cursor = state.cursor;
      const out = await call("list_messages", body);
      rows = out.messages.map((m) => [m, undefined]);
      next = out.next_cursor;
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

// a page of rows ([summary, highlighted snippet or undefined]) after those shown, or in their place for a first page
function showRows(rows, next) {
  if (!state.cursor) {
    list.replaceChildren();
    listBox.replaceChildren(list);
  }
  for (const [m, snippet] of rows) {
    state.rows.set(m.id, m);
    list.append(messageRow(m, snippet));
  }
  if (!list.children.length) listBox.replaceChildren(el("p", { class: "hint" }, state.query ? "Nothing matches." : "No messages here."));
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

async function openFolder(accountId, folder) {
  if (!(await composing.leave())) return;
  state.account = accountId;
  state.folder = folder;
  remember();
  state.query = null;
  searchForm.reset();
  searchClear.hidden = true;
  setTitle();
  closeReader();
  renderAccounts();
  return resetList();
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
  listTitle.textContent = `Search: ${query.query}`;
  searchClear.hidden = false;
  closeReader();
  renderAccounts();
  resetList();
});
searchClear.addEventListener("click", () => openFolder(state.account, state.folder));
more.addEventListener("click", loadMessages);

// ------------------------------------------------------------ several messages at once

function showBulk() {
  const n = state.selected.size;
  bulk.hidden = n === 0;
  bulkCount.textContent = n === 1 ? "1 selected" : `${n} selected`;
}

const BULK = {
  read: (ids) => ["mark_read", { message_ids: ids }, "Marked read."],
  unread: (ids) => ["mark_unread", { message_ids: ids }, "Marked unread."],
  pin: (ids) => ["set_pinned", { message_ids: ids, pinned: true }, "Pinned."],
  unpin: (ids) => ["set_pinned", { message_ids: ids, pinned: false }, "Unpinned."],
  label: (ids) => ["add_labels", { message_ids: ids, label_ids: [bulkLabel.value] }, "Labelled."],
  move: (ids) => ["move_messages", { message_ids: ids, folder: bulkFolder.value }, "Moved."],
  trash: (ids) => ["trash_messages", { message_ids: ids }, "Moved to the trash."],
  restore: (ids) => ["restore_messages", { message_ids: ids }, "Restored."],
};

for (const button of bulk.querySelectorAll("button[data-bulk]")) {
  button.addEventListener("click", async () => {
    const ids = [...state.selected];
    if (!ids.length) return;
    const [op, body, done] = BULK[button.dataset.bulk](ids);
    if (await perform(op, body, done)) {
      await Promise.all([resetList(), refreshCounts()]);
    }
  });
}

// ------------------------------------------------------------ reading a thread

function closeReader() {
  reader.hidden = true;
  listView.hidden = false;
  threadBox.replaceChildren();
  threadSummaryBox.replaceChildren();
}

document.getElementById("reader-back").addEventListener("click", () => {
  closeReader();
  const row = list.querySelector(`li[data-message-id="${CSS.escape(reader.dataset.opened || "")}"] button.open`);
  if (row) row.focus();
});

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
  const parts = [
    el("div", { class: "message-actions row-actions" },
      el("button", { type: "button", class: "reply", onclick: () => composing.reply(m, false) }, "Reply"),
      el("button", { type: "button", class: "reply-all", onclick: () => composing.reply(m, true) }, "Reply all"),
      el("button", { type: "button", class: "forward", onclick: () => composing.forward(m) }, "Forward"),
    ),
    el("dl", { class: "headers" },
      el("dt", {}, "From"), el("dd", { dir: "auto" }, m.sender ? address(m.sender) : "—"),
      el("dt", {}, "To"), el("dd", { dir: "auto" }, m.to.map(address).join(", ") || "—"),
      m.cc.length ? [el("dt", {}, "Cc"), el("dd", { dir: "auto" }, m.cc.map(address).join(", "))] : null,
      el("dt", {}, "Date"), el("dd", {}, m.date ? new Date(m.date).toLocaleString() : "—"),
    ),
    messageSummary(m),
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

async function openMessage(m) {
  if (!(await composing.leave())) return;
  listView.hidden = true;
  reader.hidden = false;
  reader.dataset.opened = m.id;
  threadTitle.textContent = shown(m.subject || "(no subject)");
  threadTitle.dir = "auto";
  threadSummaryBox.replaceChildren(threadSummary({ id: m.thread_id }));
  threadBox.replaceChildren(el("p", { class: "hint" }, "Loading…"));
  let thread;
  try {
    thread = await call("get_thread", { thread_id: m.thread_id });
  } catch (err) {
    threadBox.replaceChildren(el("p", { class: "errors" }, describeError(err)));
    return;
  }
  const articles = thread.messages.map((t) => [t, threadMessage(t, t.id === m.id)]);
  threadBox.replaceChildren(
    ...articles.map(([, a]) => a),
    thread.truncated ? el("p", { class: "hint" }, `This thread holds ${thread.thread.message_count} messages; the first ${thread.messages.length} are shown.`) : "",
  );
  const opened = articles.find(([t]) => t.id === m.id);
  if (opened) {
    await expand(opened[1], opened[0]);
    opened[1].scrollIntoView({ block: "nearest" });
  }
  threadTitle.focus?.();
  if (m.read) return;
  if (state.markReadOnOpen) await markRead(m);
  else if (opened) {
    const button = el("button", { type: "button", class: "mark-read" }, "Mark read");
    button.addEventListener("click", async () => {
      if (await markRead(m)) button.remove();
    });
    opened[1].querySelector(".message-body").prepend(button);
  }
}

// the person opened it (or asked): mark_read, audited as theirs
async function markRead(m) {
  const out = await perform("mark_read", { message_ids: [m.id] });
  if (!out) return false;
  m.read = true;
  const row = list.querySelector(`li[data-message-id="${CSS.escape(m.id)}"]`);
  if (row) row.replaceWith(messageRow(m));
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

// what the server read for the first screen (the same operations, through the gate), or null: then it is asked
const given = (() => {
  const node = document.getElementById("mail-first");
  try {
    return node ? JSON.parse(node.textContent) : null;
  } catch (_) {
    return null;
  }
})();

// That list goes first and alone: the server answers it before the side's accounts, labels, folder counts and
// preferences, which follow at once (the rows' label chips are added when the labels are in).
// When the server brought the list the page opens on, it shows at once, and the rest follows.
(async () => {
  const asked = new URLSearchParams(location.search);
  const last = asked.get("account") ? { account: asked.get("account"), folder: asked.get("folder") || "inbox" } : remembered();
  const listing = given && given.listing;
  if (listing && (!last || (last.account === listing.account_id && last.folder === listing.folder))) {
    state.account = listing.account_id;
    state.folder = listing.folder;
    state.labels = Object.fromEntries(given.labels.labels.map((l) => [l.id, l]));
    showRows(listing.page.messages.map((m) => [m, undefined]), listing.page.next_cursor);
    loadPreference();
    if (!(await loadAccounts(given))) return;
    composing.start(state.accounts);
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
  if (last && state.accounts.some((a) => a.id === state.account)) {
    for (const row of list.querySelectorAll("li.message")) {
      const m = state.rows.get(row.dataset.messageId);
      if (m && m.label_ids.length) row.querySelector(".meta time").before(...labelChips(m));
    }
    await loadAllFolders();
    return;
  }
  state.account = state.accounts[0].id;
  state.folder = "inbox";
  await Promise.all([openFolder(state.account, state.folder), loadAllFolders()]);
})();
