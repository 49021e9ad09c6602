// /mail's summaries: a message's cached summary (get_message carries it) with a Summarize button, and a thread's
// "Summarize the thread". The buttons call summarize_messages (without mark_read: summarizing marks nothing read)
// and summarize_thread. A summary is written on a worker: an answer still `pending` is asked for again every few
// seconds, a bounded number of times (each call also waits a while on the server), and the box says what it
// waits for. When no summary worker is there the operation refuses with SERVICE_UNAVAILABLE, and the box says so.
// A summary is text of the mail's: set as text, never as HTML.
import { call, describeError, el, OperationError } from "../lib.js";

const POLL_MS = 3000;
const POLL_TRIES = 10;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function showSummary(box, text, truncated) {
  const thread = box.dataset.scope === "thread";
  box.replaceChildren(
    el(thread ? "h3" : "h4", { class: "summary-title" }, thread ? "Summary of the thread" : "Summary"),
    el("p", { class: "summary-text" }, text, truncated ? " […]" : ""),
  );
}

// Asks `op` until the summary is done, failed, refused or the tries run out; `pick` finds the one state in the
// answer. `box` shows where it is; `button` is disabled meanwhile.
async function summarize(box, button, op, body, pick) {
  button.disabled = true;
  const status = el("p", { class: "hint summary-state" }, "Summarizing…");
  box.replaceChildren(status);
  try {
    for (let tries = 0; tries < POLL_TRIES; tries++) {
      let out;
      try {
        out = pick(await call(op, body));
      } catch (err) {
        const unavailable = err instanceof OperationError && err.error.code === "SERVICE_UNAVAILABLE";
        box.replaceChildren(
          el("p", { class: "errors summary-state" },
            unavailable ? "No summary worker is available right now, so nothing was summarized. Try again in a few minutes." : describeError(err)),
        );
        return;
      }
      if (!box.isConnected) return; // the person went elsewhere
      if (out.state === "done") {
        showSummary(box, out.summary || "(nothing to summarize)", out.truncated);
        button.hidden = true;
        return;
      }
      if (out.state === "failed") {
        box.replaceChildren(el("p", { class: "errors summary-state" }, `No summary could be written (${out.reason || "failed"}).`));
        return;
      }
      status.textContent = "Summarizing… the summary worker has not finished yet; this page asks again in a moment.";
      await sleep(POLL_MS);
      if (!box.isConnected) return;
    }
    box.replaceChildren(el("p", { class: "hint summary-state" }, "The summary is not ready yet. Try again in a while."));
  } finally {
    button.disabled = false;
  }
}

// A message's summary: the cached one when there is one, else a Summarize button.
export function messageSummary(m) {
  const box = el("div", { class: "summary-box", "aria-live": "polite" });
  const button = el("button", { type: "button", class: "summarize" }, "Summarize");
  button.addEventListener("click", () =>
    summarize(box, button, "summarize_messages", { message_ids: [m.id] }, (out) => out.summaries[0]),
  );
  if (m.summary) {
    showSummary(box, m.summary, false);
    button.hidden = true;
  }
  return el("div", { class: "summary" }, box, button);
}

// The thread's summary, on demand.
export function threadSummary(thread) {
  const box = el("div", { class: "summary-box", "aria-live": "polite", "data-scope": "thread" });
  const button = el("button", { type: "button", class: "summarize-thread" }, "Summarize the thread");
  button.addEventListener("click", () => summarize(box, button, "summarize_thread", { thread_id: thread.id }, (out) => out));
  return el("div", { class: "summary thread-summary" }, button, box);
}
