// /mail's "Waiting for reply": an entry under the views with how many conversations wait (list_awaiting_reply: the
// threads where the mailbox wrote last, N days ago or more, and nobody answered since), opened by mail.js as a list
// of those threads, each with its days of waiting and whether the nudge brought it back; and the person's own
// setting (after how many days, and the nudge on or off: get_preferences / set_preferences). The operation decides
// what waits; the page only shows it.
import { call, describeError, el, perform } from "../lib.js";

const box = document.getElementById("mail-awaiting");
const settings = document.getElementById("awaiting-settings");
const daysInput = document.getElementById("awaiting-days");
const nudgeInput = document.getElementById("awaiting-nudge");

let opener = null; // mail.js's openAwaiting
let open = false; // the list shows the waiting conversations
let first = null; // list_awaiting_reply's first page, for the count

const days = (n) => (n === 1 ? "1 day" : `${n} days`);
const recipients = (t) => t.to.map((a) => a.name || a.address).join(", ") || "(no recipient)";

function render() {
  if (!first) return;
  const n = first.threads.length;
  const count = n ? `${n}${first.next_cursor ? "+" : ""}` : "";
  box.replaceChildren(
    el("ul", { class: "views" },
      el("li", {},
        el("button", {
          type: "button",
          class: "folder",
          id: "awaiting-open",
          "aria-current": open ? "true" : null,
          onclick: async () => {
            if (await opener()) {
              open = true;
              render();
            }
          },
        },
        el("span", {}, "Waiting for reply"),
        count ? el("span", { class: "view-count", "aria-label": `${count} conversations` }, count) : null),
      ),
    ),
    el("p", { class: "hint" }, `After ${days(first.days)} without an answer.`),
  );
}

export async function load() {
  try {
    first = await call("list_awaiting_reply", {});
  } catch (err) {
    box.replaceChildren(el("p", { class: "errors" }, describeError(err)));
    return;
  }
  render();
}

// one row of the list mail.js shows: whom it waits on, the subject, how long, whether the nudge brought it back
export function row(t, openThread) {
  return el("li", { class: "conversation awaiting", "data-thread-id": t.thread_id, "data-key": t.thread_id },
    el("button", { type: "button", class: "open", onclick: () => openThread(t.thread_id, { focus: t.last_message_id, push: true }) },
      el("span", { class: "sender", dir: "auto" }, `To ${recipients(t)}`),
      el("span", { class: "subject", dir: "auto" }, t.subject || "(no subject)"),
      el("span", { class: "snippet", dir: "auto" }, t.snippet),
    ),
    el("span", { class: "meta" },
      t.nudged_at ? el("span", { class: "nudged", title: `Brought back to the inbox ${new Date(t.nudged_at).toLocaleString()}` }, "nudged") : null,
      el("span", { class: "waiting-days" }, `waiting ${days(t.days_waiting)}`),
    ),
  );
}

// mail.js tells whether the list shows the waiting conversations (false: a folder, a search or a view)
export function shown(value) {
  if (open !== value) {
    open = value;
    render();
  }
}

async function loadSettings() {
  try {
    const prefs = await call("get_preferences", {});
    daysInput.value = String(prefs.awaiting_reply_days);
    nudgeInput.checked = prefs.awaiting_reply_nudge;
  } catch (_) {
    settings.hidden = true;
  }
}

settings.addEventListener("submit", async (event) => {
  event.preventDefault();
  const n = Number(daysInput.value);
  if (!Number.isInteger(n) || n < 1) {
    daysInput.focus();
    return;
  }
  const out = await perform("set_preferences", { awaiting_reply_days: n, awaiting_reply_nudge: nudgeInput.checked }, "Saved.");
  if (!out) return;
  daysInput.value = String(out.awaiting_reply_days);
  nudgeInput.checked = out.awaiting_reply_nudge;
  await load();
  if (open) opener();
});

// mail.js starts it once the accounts are in
export function start(openAwaiting) {
  opener = openAwaiting;
  load();
  loadSettings();
}
