// Home: what needs the person now — requests waiting for approval (list_outbound), mailboxes that fail to sync
// (list_accounts' sync_problem), what assistants did last (list_audit_events, each event in the log's own words,
// which never hold mail) — and, for a tenant that has no mail or no assistant yet, the three steps to start
// (list_accounts, list_api_keys, list_connections), with the client configuration to copy.
import { call, describeError, el, when } from "../lib.js";

const ACTIVITY = 5;
const WAITING = 5;

async function answer(op, body) {
  try {
    return { output: await call(op, body) };
  } catch (err) {
    return { error: describeError(err) };
  }
}

function show(id, result, render) {
  const target = document.getElementById(id);
  target.replaceChildren(result.error ? el("p", { class: "errors" }, result.error) : render(result.output));
}

const items = (rows) => el("ul", { class: "needs" }, rows);

function waiting(output) {
  const requests = output.requests;
  if (!requests.length) return el("p", { class: "hint" }, "No e-mail is waiting for your approval.");
  const rows = requests.map(({ request, subject, credential, requested_by: by }) => {
    const named = credential || by;
    const who = named.charAt(0).toUpperCase() + named.slice(1);
    const n = request.recipients;
    return el(
      "li",
      { "data-request": request.request_id },
      `${who} asks to send “${subject}” to ${n} ${n === 1 ? "recipient" : "recipients"} (${when(request.created_at)}). `,
      el("a", { href: `/outbound?request=${encodeURIComponent(request.request_id)}` }, "Review it"),
    );
  });
  const more = output.next_cursor ? [el("p", {}, el("a", { href: "/outbound" }, "More are waiting on the Outbound page."))] : [];
  return el("div", {}, items(rows), ...more);
}

function failing(output) {
  const bad = output.accounts.filter((a) => a.sync_error);
  if (!output.accounts.some((a) => a.kind === "imap")) return el("p", { class: "hint" }, "No mailbox connected yet.");
  if (!bad.length) return el("p", { class: "hint" }, "Every connected mailbox syncs.");
  const rows = bad.map((a) =>
    el(
      "li",
      { "data-account": a.id },
      `${a.name}${a.email_address ? ` (${a.email_address})` : ""}: ${a.sync_problem}; `,
      `last synced ${a.last_synced_at ? when(a.last_synced_at) : "never"}. `,
      el("a", { href: "/mailboxes" }, "Fix it"),
    ),
  );
  return items(rows);
}

function activity(output) {
  if (!output.events.length) return el("p", { class: "hint" }, "No assistant has done anything here yet.");
  const rows = output.events.map((e) =>
    el("li", { "data-event": String(e.seq) }, `${when(e.created_at)}: ${e.description}`),
  );
  return el("div", {}, items(rows), el("p", {}, el("a", { href: "/audit?principal=agent" }, "The whole log")));
}

function steps(accounts, keys, connections) {
  const hasMail = !accounts.error && accounts.output.accounts.length > 0;
  const liveKeys = keys.error ? [] : keys.output.api_keys.filter((k) => !k.revoked);
  const liveConnections = connections.error ? [] : connections.output.connections.filter((c) => !c.revoked);
  const hasAgent = liveKeys.length + liveConnections.length > 0;
  const section = document.getElementById("start");
  if (hasMail && hasAgent) return;
  for (const [name, done] of [["mail", hasMail], ["agent", hasAgent]]) {
    const step = section.querySelector(`[data-step="${name}"]`);
    step.dataset.done = done ? "true" : "false";
    const state = step.querySelector(".step-state");
    state.textContent = done ? "Done." : "";
    state.className = done ? "step-state step-done" : "step-state";
  }
  section.hidden = false;
}

document.getElementById("copy-config").addEventListener("click", async () => {
  const config = document.getElementById("client-config");
  const result = document.getElementById("copy-config-result");
  try {
    await navigator.clipboard.writeText(config.textContent);
    result.textContent = "Copied.";
  } catch (_) {
    const range = document.createRange();
    range.selectNodeContents(config);
    window.getSelection().removeAllRanges();
    window.getSelection().addRange(range);
    result.textContent = "Selected: press Ctrl+C (⌘C) to copy.";
  }
});

const [outbound, accounts, events, keys, connections] = await Promise.all([
  answer("list_outbound", { state: "awaiting_approval", limit: WAITING }),
  answer("list_accounts", {}),
  answer("list_audit_events", { principal: "agent", limit: ACTIVITY }),
  answer("list_api_keys", {}),
  answer("list_connections", {}),
]);
show("waiting", outbound, waiting);
show("failing", accounts, failing);
show("activity", events, activity);
steps(accounts, keys, connections);
document.querySelector("main").dataset.ready = "true";
