// /outbound: what assistants asked to send, exactly as it would be sent, for the person to approve or reject;
// requests whose outcome is unknown, to settle; and the history of every request, filtered by state and paged
// by cursor. list_outbound, get_outbound_attachment, approve_outbound, reject_outbound, settle_outbound_request
// and get_outbound_request; the page polls every few seconds so states change while it is open.
import { askFirst, button, call, describeError, download, el, isAsking, list, notice, perform, row, shown, table, when } from "../lib.js";
import { provenanceSection } from "./provenance.js";

const POLL_MS = 5000;
const HISTORY_PAGE = 10;
const STATES = {
  requested: "being recorded", awaiting_approval: "waiting for approval", approved: "approved, scheduled",
  queued: "queued", sending: "sending", sent: "sent", failed: "failed", rejected: "rejected",
  cancelled: "cancelled", unknown: "outcome unknown",
};

// what a request does: an e-mail (kind "email" shows no tag), or an unsubscribe from a list
const KINDS = { unsubscribe_mail: "Unsubscribe by e-mail", unsubscribe_post: "One-click unsubscribe" };
const isPost = (r) => r.request.kind === "unsubscribe_post";
const kindTag = (r) => (KINDS[r.request.kind] ? el("span", { class: "kind", "data-kind": r.request.kind }, `${KINDS[r.request.kind]}: `) : "");
// a one-click unsubscribe goes to the list's address, shown without its query string (the list's token)
const destination = (r) => (isPost(r) ? `the list at ${r.request.target}` : recipients(r));

// the approval link an assistant hands on names its request: that one is picked out (or its fate told)
const named = new URLSearchParams(window.location.search).get("request");
const idOf = (r) => r.request.request_id;
const recipients = (r) => list([...r.to, ...r.cc.map((a) => `${a} (cc)`), ...r.bcc.map((a) => `${a} (bcc)`)], "nobody");
const size = (n) => (n >= 1048576 ? `${(n / 1048576).toFixed(1)} MB` : n >= 1024 ? `${Math.ceil(n / 1024)} KB` : `${n} bytes`);
const asker = (r) => (r.principal === "agent" ? `${r.credential || "an assistant"}, for ${r.requested_by}` : `${r.requested_by || "a person"} (in person)`);

// every header that will be sent, as it is sent (the From header with its display name)
const headers = (r) => {
  const rows = [
    ["From", r.request.from_header],
    ["To", list(r.to, "")],
    ["Cc", list(r.cc, "")],
    ["Bcc", list(r.bcc, "")],
    ["Subject", r.subject || "(no subject)"],
    ["In-Reply-To", r.in_reply_to ? `<${r.in_reply_to}>` : ""],
    ["References", r.references.map((m) => `<${m}>`).join(" ")],
  ].filter(([, value]) => value);
  return el("dl", { class: "headers" }, rows.flatMap(([name, value]) => [el("dt", {}, name), el("dd", { dir: "auto" }, value)]));
};

// what an approval binds to, folded away: a person decides from the e-mail itself
const technical = (r) =>
  el("details", { class: "technical" },
    el("summary", {}, "Technical details"),
    el("dl", {}, el("dt", {}, "Content hash"), el("dd", {}, el("code", {}, r.request.content_hash))),
    el("p", { class: "hint" }, "An approval holds for exactly this content: if anything in it changed, the approval would not apply."),
  );

const downloadFile = (file) => download("get_outbound_attachment", { attachment_id: file.id });

const files = (r) =>
  r.files.length
    ? el("div", { class: "outbound-files" }, el("h3", {}, `Attachments (${r.files.length})`),
      el("ul", { class: "attachments" }, r.files.map((f) => el("li", {},
        el("bdi", { class: "filename" }, f.filename), ` (${f.content_type}, ${size(f.size)}) `,
        button("Download", () => downloadFile(f), { "data-action": "download", "data-file-id": f.id, "aria-label": `Download ${f.filename}` }),
      ))))
    : el("p", { class: "hint" }, "No attachments.");

// ------------------------------------------------------------ where the request came from (provenance)

const provenance = (r) => provenanceSection(r.request.provenance);

// ------------------------------------------------------------ waiting for approval

// a one-click unsubscribe: no e-mail, one POST of "List-Unsubscribe=One-Click" to the list's address
function waitingPost(r) {
  return el("article", { class: "outbound", "data-request-id": idOf(r), "data-hash": r.request.content_hash, "data-kind": r.request.kind },
    el("h3", {}, kindTag(r), "leave a mailing list"),
    provenance(r),
    el("p", { class: "hint asked" }, `Asked by ${asker(r)}, ${when(r.request.created_at)}`),
    el("p", {}, "Once approved, Oaken sends the list's one-click unsubscribe request (the form field List-Unsubscribe=One-Click, nothing else: no cookies, no login) once to ",
      el("code", {}, r.request.target), ". The address came from the list's own message, whose DKIM signature vouches for it; the part after “?” is the list's token and is not shown."),
    technical(r),
    el("div", { class: "row-actions" },
      button("Approve unsubscribe", () => approveIt(r), { "data-action": "approve" }),
      button("Reject", () => rejectIt(r), { "data-action": "reject" })),
  );
}

function waiting(r) {
  if (isPost(r)) return waitingPost(r);
  const body = el("pre", { class: "message-text" }, r.body + (r.body_truncated ? "\n…" : ""));
  const approve = button("Approve and send", () => approveIt(r), { "data-action": "approve" });
  const reject = button("Reject", () => rejectIt(r), { "data-action": "reject" });
  const parts = [];
  if (r.body_truncated) {
    // what is approved is what is sent: the whole of it is read first
    approve.disabled = true;
    const whole = button(`Show the whole message (${r.body_chars} characters) before approving`, async () => {
      try {
        const out = await call("list_outbound", { request_id: idOf(r) });
        const found = out.requests[0];
        if (!found || found.request.content_hash !== r.request.content_hash) return refresh();
        body.textContent = shown(found.body);
        approve.disabled = false;
        whole.remove();
      } catch (err) {
        notice(describeError(err), true);
      }
    }, { "data-action": "show-whole" });
    parts.push(whole);
  }
  return el("article", { class: "outbound", "data-request-id": idOf(r), "data-hash": r.request.content_hash, "data-kind": r.request.kind },
    el("h3", { dir: "auto" }, kindTag(r), r.subject || "(no subject)"),
    provenance(r),
    el("p", { class: "hint asked" }, `Asked by ${asker(r)}, ${when(r.request.created_at)}` +
      (r.request.send_at ? `; to be sent ${when(r.request.send_at)}` : "")),
    headers(r),
    files(r),
    el("h3", {}, "Message"),
    body,
    ...parts,
    technical(r),
    el("div", { class: "row-actions" }, approve, reject),
  );
}

async function approveIt(r) {
  const asked = isPost(r)
    ? await askFirst("Unsubscribe from this list?", `Oaken sends the one-click unsubscribe request once to ${r.request.target}.`, "Approve unsubscribe")
    : await askFirst("Send this e-mail?",
    `From ${r.request.from_header} to ${recipients(r)}, exactly as shown` +
    (r.files.length ? `, with ${r.files.length === 1 ? "1 attachment" : `${r.files.length} attachments`}` : "") + ". Once approved it is delivered.",
    "Approve and send");
  if (!asked) return notice("Nothing was changed.");
  const body = { request_id: idOf(r), content_hash: r.request.content_hash }; // approve exactly what is shown
  if (await perform("approve_outbound", body, "Approved: it is queued for delivery.")) refresh();
}

async function rejectIt(r) {
  const asked = await askFirst(isPost(r) ? "Reject this unsubscribe?" : "Reject this e-mail?",
    `${isPost(r) ? "The unsubscribe request" : `“${r.subject || "(no subject)"}”`} to ${destination(r)} will not be sent. The assistant that asked is told, with your reason if you give one.`,
    "Reject", { label: "Reason (optional; the assistant reads it)" });
  if (!asked) return notice("Nothing was changed.");
  const body = { request_id: idOf(r) };
  if (asked.text.trim()) body.reason = asked.text.trim();
  if (await perform("reject_outbound", body, "Rejected: it will not be sent.")) refresh();
}

// ------------------------------------------------------------ outcome unknown

const unknown = (r) =>
  el("article", { class: "outbound", "data-request-id": idOf(r), "data-hash": r.request.content_hash },
    el("h3", { dir: "auto" }, kindTag(r), isPost(r) ? "leave a mailing list" : r.subject || "(no subject)"),
    el("p", {}, isPost(r) ? `To ${destination(r)}` : `From ${r.request.from_header} to ${recipients(r)}`),
    el("p", { class: "hint" }, `Requested ${when(r.request.created_at)}; ${r.request.attempts === 1 ? "1 attempt" : `${r.request.attempts} attempts`} to send it.`),
    el("details", { class: "technical" }, el("summary", {}, "Technical details"),
      el("p", {}, `Message-ID ${r.request.message_id}; last error: ${r.request.error || "none"}.`)),
    el("div", { class: "row-actions" },
      button("It was sent", () => settle(r, "sent", "Recorded as sent."), { "data-action": "settle-sent" }),
      button("It was not sent", () => settle(r, "not_sent", "Recorded as not sent: it will not be sent again."), { "data-action": "settle-not-sent" }),
    ),
  );

const settle = async (r, outcome, done) => {
  if (await perform("settle_outbound_request", { request_id: idOf(r), outcome }, done)) refresh();
};

// A section of articles kept in place when nothing about them changed (an expanded body stays expanded).
async function section(targetId, state, render, empty) {
  const target = document.getElementById(targetId);
  try {
    const out = await call("list_outbound", { state });
    const kept = new Map([...target.querySelectorAll("article[data-request-id]")].map((a) => [a.dataset.requestId, a]));
    const articles = out.requests.map((r) => {
      const old = kept.get(idOf(r));
      return old && old.dataset.hash === r.request.content_hash ? old : render(r);
    });
    if (!articles.length) {
      if (!target.querySelector("p.hint.empty")) target.replaceChildren(el("p", { class: "hint empty" }, empty));
    } else if (articles.length !== target.children.length || articles.some((a, i) => target.children[i] !== a)) {
      target.replaceChildren(...articles);
    }
    return out.requests.map(idOf);
  } catch (err) {
    target.replaceChildren(el("p", { class: "errors" }, describeError(err)));
    return [];
  }
}

let picked = false;
async function pickOut(shown) {
  const note = document.getElementById("outbound-named");
  if (!named || !note || picked) return;
  picked = true;
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
    note.replaceChildren(el("p", { class: "hint" }, `The request this link names is no longer waiting: ${STATES[r.state] || r.state}. ${r.next}`));
  } catch (err) {
    note.replaceChildren(el("p", { class: "errors" }, describeError(err)));
  }
}

// ------------------------------------------------------------ history, newest first, a page at a time

const historyBox = document.getElementById("outbound-history");
const more = document.getElementById("history-more");
const filter = document.getElementById("history-state");
let historyRows = [];
let nextCursor = null;

const outcome = (r) => {
  const state = r.request.state;
  const parts = [el("span", { class: `state state-${state}` }, STATES[state] || state)];
  if (r.decided_by) parts.push(el("br"), el("span", { class: "hint" }, `${state === "rejected" ? "rejected" : "approved"} by ${r.decided_by} ${when(r.decided_at)}`));
  else if (r.approved_via === "policy") parts.push(el("br"), el("span", { class: "hint" }, "approved by a send policy"));
  if (r.request.reject_reason) parts.push(el("br"), el("span", { class: "reject-reason" }, `Reason: ${r.request.reject_reason}`));
  if (r.request.http_status) parts.push(el("br"), el("span", { class: "hint http-status" }, `the list answered HTTP ${r.request.http_status}`));
  if (r.error) parts.push(el("br"), el("span", { class: "hint" }, `error: ${r.error}`));
  return parts;
};

function drawHistory() {
  if (!historyRows.length) {
    historyBox.replaceChildren(el("p", { class: "hint" }, filter && filter.value ? "No request in this state." : "No request yet."));
  } else {
    historyBox.replaceChildren(table(
      ["Asked", "Subject", "To", "Asked by", "State"],
      historyRows.map((r) => row({ "data-request-id": idOf(r), "data-state": r.request.state }, [
        when(r.request.created_at),
        el("span", {}, kindTag(r), isPost(r) ? "leave a mailing list" : r.subject || "(no subject)"),
        destination(r),
        asker(r),
        el("span", {}, outcome(r)),
      ])),
    ));
  }
  more.hidden = !nextCursor;
}

const historyQuery = (cursor) => {
  const body = { limit: HISTORY_PAGE };
  if (filter && filter.value) body.state = filter.value;
  if (cursor) body.cursor = cursor;
  return body;
};

async function loadHistory() {
  const asked = filter ? filter.value : "";
  try {
    const out = await call("list_outbound", historyQuery(null));
    if ((filter ? filter.value : "") !== asked) return; // picked again meanwhile: the newer load shows it
    historyRows = out.requests;
    nextCursor = out.next_cursor;
    drawHistory();
  } catch (err) {
    historyBox.replaceChildren(el("p", { class: "errors" }, describeError(err)));
  }
}

// a poll: the newest page again; rows shown are brought up to date, newer ones come on top
async function pollHistory() {
  const asked = filter ? filter.value : "";
  try {
    const out = await call("list_outbound", historyQuery(null));
    if ((filter ? filter.value : "") !== asked) return; // the filter changed meanwhile: its own load shows it
    const shown = new Map(historyRows.map((r, i) => [idOf(r), i]));
    if (historyRows.length && !out.requests.some((r) => shown.has(idOf(r)))) {
      historyRows = out.requests; // more arrived than a page: start again from the newest
      nextCursor = out.next_cursor;
    } else {
      const fresh = [];
      for (const r of out.requests) {
        if (shown.has(idOf(r))) historyRows[shown.get(idOf(r))] = r;
        else fresh.push(r);
      }
      historyRows = [...fresh, ...historyRows];
      if (!historyRows.length) nextCursor = out.next_cursor;
    }
    drawHistory();
  } catch (_) {
    // a poll that failed is tried again at the next tick; the page keeps what it shows
  }
}

if (more) {
  more.addEventListener("click", async () => {
    more.disabled = true;
    try {
      const asked = filter ? filter.value : "";
      const out = await call("list_outbound", historyQuery(nextCursor));
      if ((filter ? filter.value : "") !== asked) return;
      const shown = new Set(historyRows.map(idOf));
      historyRows = [...historyRows, ...out.requests.filter((r) => !shown.has(idOf(r)))];
      nextCursor = out.next_cursor;
      drawHistory();
    } catch (err) {
      notice(describeError(err), true);
    } finally {
      more.disabled = false;
    }
  });
}
if (filter) filter.addEventListener("change", loadHistory);
const filters = document.getElementById("history-filters");
if (filters) filters.addEventListener("submit", (event) => { event.preventDefault(); loadHistory(); });

// ------------------------------------------------------------ refreshing

function refresh() {
  return Promise.all([
    section("outbound-list", "awaiting_approval", waiting, "Nothing is waiting for your approval."),
    section("outbound-unknown", "unknown", unknown, "No request has an unknown outcome."),
    pollHistory(),
  ]).then(([waitingIds, unknownIds]) => pickOut([...waitingIds, ...unknownIds]));
}

loadHistory().then(refresh);
// live: states change while the page is open (not while the person is answering a question, or away)
setInterval(() => {
  if (!isAsking() && document.visibilityState === "visible") refresh();
}, POLL_MS);
