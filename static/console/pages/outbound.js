// /outbound: sends waiting for the person's approval, and sends whose outcome is unknown.
import { button, call, describeError, el, list, notice, perform, when } from "../lib.js";

// the approval link an assistant hands on names its request: that one is picked out (or its fate told)
const named = new URLSearchParams(window.location.search).get("request");
const recipients = (r) => list([...r.to, ...r.cc.map((a) => `${a} (cc)`), ...r.bcc.map((a) => `${a} (bcc)`)]);

const show = async (targetId, state, render, empty) => {
  const target = document.getElementById(targetId);
  try {
    const out = await call("list_outbound", { state });
    target.replaceChildren(out.requests.length ? el("div", {}, out.requests.map(render)) : el("p", { class: "hint" }, empty));
    return out.requests.map((r) => r.request.request_id);
  } catch (err) {
    target.replaceChildren(el("p", { class: "errors" }, describeError(err)));
    return [];
  }
};

const pickOut = async (shown) => {
  const note = document.getElementById("outbound-named");
  if (!named || !note) return;
  const article = document.querySelector(`article[data-request-id="${CSS.escape(named)}"]`);
  if (article && shown.includes(named)) {
    article.classList.add("selected");
    article.setAttribute("aria-current", "true");
    article.scrollIntoView({ block: "center" });
    note.replaceChildren(el("p", { class: "hint" }, "The request your assistant sent you here for is marked below."));
    return;
  }
  try {
    const r = await call("get_outbound_request", { request_id: named });
    note.replaceChildren(el("p", { class: "hint" }, `The request this link names is no longer waiting: ${r.state.replace("_", " ")}. ${r.next}`));
  } catch (err) {
    note.replaceChildren(el("p", { class: "errors" }, describeError(err)));
  }
};

// every header that will be sent, as it is sent (the From header with its display name), and the content's hash
const headers = (r) => {
  const rows = [
    ["From", r.request.from_header],
    ["To", list(r.to)],
    ["Cc", list(r.cc)],
    ["Bcc", list(r.bcc)],
    ["Subject", r.subject],
    ["In-Reply-To", r.in_reply_to],
    ["References", r.references.join(" ")],
    ["Content hash", r.request.content_hash],
  ].filter(([, value]) => value);
  return el("dl", { class: "headers" }, rows.flatMap(([name, value]) => [el("dt", {}, name), el("dd", {}, value)]));
};

const size = (n) => (n >= 1048576 ? `${(n / 1048576).toFixed(1)} MB` : n >= 1024 ? `${Math.ceil(n / 1024)} KB` : `${n} bytes`);
const files = (r) => list(r.files.map((f) => `${f.filename} (${f.content_type}, ${size(f.size)})`));

const waiting = (r) => {
  const body = el("pre", {}, r.body + (r.body_truncated ? "\n…" : ""));
  const approve = button("Approve and send", () => decide("approve_outbound", r, "Approved: it is queued for delivery."), { "data-action": "approve" });
  const parts = [body];
  if (r.body_truncated) {
    // what is approved is what is sent: the whole of it is read first
    approve.disabled = true;
    const whole = button(`Show the whole message (${r.body_chars} characters) before approving`, async () => {
      try {
        const out = await call("list_outbound", { request_id: r.request.request_id });
        const found = out.requests[0];
        if (!found || found.request.content_hash !== r.request.content_hash) return refresh();
        body.textContent = found.body;
        approve.disabled = false;
        whole.remove();
      } catch (err) {
        notice(describeError(err), true);
      }
    }, { "data-action": "show-whole" });
    parts.push(whole, " ");
  }
  return el("article", { class: "outbound", "data-request-id": r.request.request_id },
    el("h2", {}, r.subject || "(no subject)"),
    headers(r),
    el("p", { class: "hint" }, `Requested ${when(r.request.created_at)} by ${r.principal === "agent" ? "an assistant" : r.requested_by}` +
      (r.request.send_at ? `, to be sent ${when(r.request.send_at)}` : "")),
    r.files.length ? el("p", {}, `Attachments: ${files(r)}`) : "",
    ...parts,
    approve,
    " ",
    button("Reject", () => decide("reject_outbound", r, "Rejected: it will not be sent."), { "data-action": "reject" }),
  );
};

const unknown = (r) =>
  el("article", { class: "outbound", "data-request-id": r.request.request_id },
    el("h2", {}, r.subject || "(no subject)"),
    el("p", {}, `From ${r.request.from_header} to ${recipients(r)}`),
    el("p", { class: "hint" }, `Requested ${when(r.request.created_at)}; Message-ID ${r.request.message_id}; ${r.request.attempts} attempt(s), last: ${r.request.error || "—"}`),
    button("It was sent", () => settle(r, "sent", "Recorded as sent."), { "data-action": "settle-sent" }),
    " ",
    button("It was not sent", () => settle(r, "not_sent", "Recorded as not sent: it will not be sent again."), { "data-action": "settle-not-sent" }),
  );

const refresh = () => Promise.all([
  show("outbound-list", "awaiting_approval", waiting, "Nothing is waiting for your approval."),
  show("outbound-unknown", "unknown", unknown, "No request has an unknown outcome."),
]).then(([waitingIds, unknownIds]) => pickOut([...waitingIds, ...unknownIds]));

const decide = async (op, r, done) => {
  const body = { request_id: r.request.request_id };
  if (op === "approve_outbound") body.content_hash = r.request.content_hash; // approve exactly what is shown
  if (await perform(op, body, done)) refresh();
};

const settle = async (r, outcome, done) => {
  if (await perform("settle_outbound_request", { request_id: r.request.request_id, outcome }, done)) refresh();
};

refresh();
