// /mail: Unsubscribe on a message (the operation `unsubscribe`), shown on mail that carries a List-Unsubscribe
// header (get_message's list_unsubscribe). Which kind it is (and whether a valid DKIM signature vouches for one-click)
// the page does not guess: the button asks the operation, whose proposal says which kind it is ("Unsubscribe with
// one click?", "Unsubscribe by e-mail?", "Show the list's unsubscribe link?"), or why the message offers none. A
// person confirms it in the console's dialog; the answer is shown as it came: the request made (followed on
// /outbound), or the sender's link as text, never as a link Oaken made clickable. Text only.
import { el, notice, perform } from "../lib.js";

const KINDS = {
  one_click: "One-click unsubscribe",
  mailto: "Unsubscribe by e-mail",
  link: "A link you must open yourself",
};

const keys = new Map(); // message id -> its idempotency key in this page (a retry returns the first request)
function keyFor(id) {
  if (!keys.has(id)) {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    keys.set(id, Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join(""));
  }
  return keys.get(id);
}

export const offered = () => {
  const box = document.getElementById("mail");
  return Boolean(box && "canUnsubscribe" in box.dataset);
};

// the button of a message's actions, and the box its answer shows in (below the actions)
export function unsubscribeButton(m, answerBox) {
  if (!offered() || !m.list_unsubscribe) return null; // only mail that carries a List-Unsubscribe header

  return el("button", { type: "button", class: "unsubscribe", "aria-describedby": `unsubscribe-hint-${m.id}`,
    onclick: () => unsubscribe(m, answerBox) }, "Unsubscribe…");
}

export function unsubscribeBox(m) {
  if (!offered() || !m.list_unsubscribe) return null;
  return el("div", { class: "unsubscribe-answer", id: `unsubscribe-${m.id}`, "aria-live": "polite" },
    el("p", { class: "hint", id: `unsubscribe-hint-${m.id}` },
      "Unsubscribe asks the message's own List-Unsubscribe header: you are shown which kind it is before anything is done."));
}

async function unsubscribe(m, answerBox) {
  const out = await perform("unsubscribe", { message_id: m.id, idempotency_key: keyFor(m.id) });
  if (!out) return;
  const kind = el("strong", { class: "unsubscribe-kind", "data-method": out.method }, KINDS[out.method] || out.method);
  if (out.method === "link") {
    notice("Nothing was sent or opened: the list offers only a link you must open yourself.");
    answerBox.replaceChildren(
      el("p", {}, kind, ": nothing was sent or opened."),
      el("p", {}, "The sender's link (not made clickable; copy it into your browser only if you trust the sender):"),
      el("p", {}, el("code", { class: "sender-link" }, out.sender_link || "")),
      el("p", { class: "hint" }, out.sender_link_note || ""),
    );
    return;
  }
  notice(`${KINDS[out.method]}: requested.`);
  answerBox.replaceChildren(
    el("p", {}, kind, `: ${out.state === "queued" ? "approved and on its way" : out.state || "requested"}. `, out.next),
    el("p", {}, el("a", { href: `/outbound?request=${encodeURIComponent(out.request_id)}` }, "Follow it on Outbound")),
  );
}
