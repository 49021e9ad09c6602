// /audit: the audit log, newest first and filtered, each event in the words list_audit_events gives; Verify walks
// the chain (verify_audit) and Export saves it as JSON lines (export_audit_chain, page after page), up to the head
// Verify checked when asked. The console's own reads are folded into one line per person and day unless "Show the
// console's own reads" is ticked (list_audit_events console_reads); each event opens in full at #event-<seq>
// (get_audit_event), so Back and reload work. The page decides nothing: who may see which events, which reads
// fold, and how an event reads, come from the operations.
import { call, describeError, el, notice, plainError, when } from "../lib.js";
import { fillUndo } from "../undo.js";

const form = document.getElementById("audit-filters");
const target = document.getElementById("audit-list");
const more = document.getElementById("audit-more");
const title = document.getElementById("audit-title");
const credentials = document.getElementById("filter-credential");
const summary = document.getElementById("audit-summary");
const body = el("tbody");
let cursor = null;
let filters = {};
let tally = { agent: 0, internal: 0, person: 0, reads: 0, partial: false };

const outcome = (e) => (e.outcome === "ok" ? "done" : el("span", { class: "status-revoked" }, `refused: ${e.outcome}`));
// assistants (keys and connections) and automations (Oaken's own tasks and plugins) come first: marked on their row
const BY = { agent: "Assistant", internal: "Automation" };
const by = (e) => (BY[e.principal] ? el("span", { class: `by by-${e.principal}` }, BY[e.principal]) : null);
const clock = (iso) => new Date(iso).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });

function eventRow(e) {
  return el("tr", { "data-seq": e.seq, "data-operation": e.operation, "data-outcome": e.outcome, class: BY[e.principal] ? "first-class" : null },
    el("td", {}, when(e.created_at)),
    el("td", {}, by(e), by(e) ? " " : null, e.description),
    el("td", {}, outcome(e)),
    el("td", {}, el("a", { href: `#event-${e.seq}`, "aria-label": `#${e.seq}: the event in full`, title: `hash ${e.hash}` }, `#${e.seq}`)),
  );
}

// a person's reads in the console, folded: "You looked at mail and the audit log in the console 312 times between
// 10:02 and 10:41", with the way to list them
function foldedRow(f) {
  const span = f.count === 1 ? ` at ${clock(f.last_at)}` : ` between ${clock(f.first_at)} and ${clock(f.last_at)}`;
  return el("tr", { class: "folded", "data-folded": f.count },
    el("td", {}, when(f.last_at)),
    el("td", { colspan: "3" }, `${f.description}${span}. `,
      el("button", { type: "button", class: "link", "data-action": "show-reads", onclick: showReads }, "Show reads")),
  );
}

function showReads() {
  form.elements.namedItem("reads").checked = true;
  show();
}

// the page's rows in seq order: each folded line goes where its newest read was
function merged(events, folds) {
  const rows = [];
  const waiting = [...folds];
  for (const e of events) {
    while (waiting.length && waiting[0].last_seq > e.seq) rows.push(foldedRow(waiting.shift()));
    rows.push(eventRow(e));
  }
  return [...rows, ...waiting.map(foldedRow)];
}

function count(out) {
  for (const e of out.events) {
    if (e.principal in tally) tally[e.principal] += 1;
  }
  for (const f of out.folded_reads) tally.reads += f.count;
  const parts = [];
  const said = (n, one, many) => n && parts.push(`${n} ${n === 1 ? one : many}`);
  said(tally.agent, "thing assistants did", "things assistants did");
  said(tally.internal, "thing automations did", "things automations did");
  said(tally.person, "by people", "by people");
  said(tally.reads, "console read folded", "console reads folded");
  if (out.folded_reads_complete === false) tally.partial = true;
  const partial = tally.partial ? " Older console reads in a long stretch are not counted." : "";
  summary.textContent = parts.length ? `Shown so far: ${parts.join(", ")}.${partial}` : "";
}

function readForm() {
  const data = new FormData(form);
  const out = {};
  for (const key of ["operation", "principal", "outcome"]) {
    const value = (data.get(key) || "").trim();
    if (value) out[key] = value;
  }
  const credential = data.get("credential") || "";
  if (credential) {
    const [kind, id] = credential.split(":");
    out.credential_kind = kind;
    out.credential_id = id;
  }
  for (const key of ["since", "until"]) {
    const value = data.get(key);
    if (value) out[key] = new Date(value).toISOString(); // the person's local time, sent with its zone
  }
  if (data.get("reads")) out.console_reads = "show";
  return out;
}

async function next() {
  more.disabled = true;
  try {
    const asked = { console_reads: "fold", ...filters };
    const out = await call("list_audit_events", cursor ? { ...asked, cursor } : asked);
    body.append(...merged(out.events, out.folded_reads));
    count(out);
    if (!cursor) {
      const head = el("thead", {}, el("tr", {}, ["When", "What happened", "Outcome", "Event"].map((h) => el("th", { scope: "col" }, h))));
      target.replaceChildren(
        out.events.length || out.folded_reads.length
          ? el("div", { class: "table-wrap", tabindex: "0" }, el("table", {}, head, body))
          : el("p", { class: "hint" }, "No events match."),
      );
    }
    cursor = out.next_cursor;
    more.hidden = !cursor;
  } catch (err) {
    target.replaceChildren(el("p", { class: "errors" }, describeError(err)));
    more.hidden = true;
  } finally {
    more.disabled = false;
  }
}

function show() {
  filters = readForm();
  cursor = null;
  tally = { agent: 0, internal: 0, person: 0, reads: 0, partial: false };
  body.replaceChildren();
  const chosen = credentials.selectedOptions[0];
  title.textContent = filters.credential_id && chosen && chosen.value ? `What ${chosen.textContent} did` : "Audit log";
  const query = new URLSearchParams(filters);
  history.replaceState(history.state, "", `${query.size ? `?${query}` : location.pathname}${location.hash}`);
  return next();
}

// the credentials to filter by are the ones list_api_keys / list_connections show this person
async function fillCredentials(wanted) {
  const options = [];
  try {
    const keys = await call("list_api_keys", {});
    for (const k of keys.api_keys) options.push(el("option", { value: `apikey:${k.id}` }, `API key ${k.name || "unnamed"} (${k.prefix}_…)`));
  } catch (_) {
    /* the list stays shorter; the log itself still answers */
  }
  try {
    const connections = await call("list_connections", {});
    for (const c of connections.connections) options.push(el("option", { value: `oauth:${c.id}` }, `connection ${c.client_name || "an assistant"}`));
  } catch (_) {
    /* as above */
  }
  credentials.append(...options);
  if (wanted) credentials.value = wanted;
  // "Undo what this assistant did since …": the same credentials, the one this page shows chosen
  fillUndo(options.map((o) => ({ value: o.value, text: o.textContent })), wanted);
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  show();
});
form.addEventListener("reset", () => setTimeout(show, 0));
more.addEventListener("click", next);

const verify = document.getElementById("verify-chain");
const result = document.getElementById("verify-result");
const checked = document.getElementById("verify-head");
const exportHere = document.getElementById("export-verified");
if (verify) {
  verify.addEventListener("click", async () => {
    verify.disabled = true;
    result.hidden = false;
    result.className = "";
    result.textContent = "Walking the chain…";
    checked.hidden = true;
    try {
      const out = await call("verify_audit", {});
      if (out.ok) {
        result.textContent = `Intact, ${out.events_checked} events, head hash ${out.head_hash}.`;
        result.className = "status-ok";
        // what an export ending here must end with: its last line's hash is this one
        checked.querySelector("[data-head]").textContent = `Checked up to event #${out.head_seq} (hash ${out.head_hash}).`;
        if (exportHere) {
          exportHere.dataset.upTo = out.head_hash;
          exportHere.dataset.seq = out.head_seq;
        }
        checked.hidden = false;
      } else {
        const what = out.broken_operation ? ` (${out.broken_operation}, ${when(out.broken_at)})` : " (missing)";
        result.textContent = `Broken at event #${out.first_broken_seq}${what}: ${out.reason}. ${out.events_checked} events were checked.`;
        result.className = "errors";
      }
    } catch (err) {
      result.textContent = describeError(err);
      result.className = "errors";
    } finally {
      verify.disabled = false;
    }
  });
}

// every page of the export, from the first (which fixes where it ends: `upTo`, or the newest event) on
async function exportChain(button, upTo) {
  button.disabled = true;
  notice("Exporting the chain…");
  const lines = [];
  try {
    let page = await call("export_audit_chain", upTo ? { up_to: upTo } : {});
    lines.push(...page.lines);
    while (page.next_cursor) {
      page = await call("export_audit_chain", { cursor: page.next_cursor });
      lines.push(...page.lines);
    }
    const file = new Blob([lines.map((line) => `${line}\n`).join("")], { type: "application/x-ndjson" });
    const name = upTo ? `audit-${button.dataset.tenant}-to-${page.head_seq}.jsonl` : `audit-${button.dataset.tenant}.jsonl`;
    const link = el("a", { href: URL.createObjectURL(file), download: name, hidden: true });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
    notice(`Exported ${lines.length} events, up to event #${page.head_seq}.`);
  } catch (err) {
    notice(describeError(err), true);
  } finally {
    button.disabled = false;
  }
}

const exporter = document.getElementById("export-chain");
if (exporter) exporter.addEventListener("click", () => exportChain(exporter, null));
if (exportHere) exportHere.addEventListener("click", () => exportChain(exportHere, exportHere.dataset.upTo));

// ------------------------------------------------------------ one event in full, at #event-<seq>

const dialog = document.getElementById("audit-event");
const detail = document.getElementById("audit-event-body");
const detailTitle = document.getElementById("audit-event-title");
const EVENT = /^#event-(\d+)$/;
// how many event addresses were followed on this page since the list (kept in each entry's history state, so Back
// and Forward know it): closing the dialog goes back that far, to the list, instead of adding an entry
let depth = 0;

const shownValue = (value) => (value === null || value === undefined ? "—" : typeof value === "string" ? value : JSON.stringify(value));
const pair = (term, ...value) => [el("dt", {}, term), el("dd", {}, ...value)];
const hashLink = (seq, hash) => (seq ? el("a", { href: `#event-${seq}` }, el("code", {}, hash)) : el("code", {}, hash));

function changes(targets) {
  if (!targets.length) return el("p", { class: "hint" }, "This event records no change.");
  const head = el("thead", {}, el("tr", {}, ["What", "Before", "After"].map((h) => el("th", { scope: "col" }, h))));
  const rows = targets.map((t) =>
    el("tr", {},
      el("td", {}, [t.kind, t.name].filter(Boolean).join(" ") || "an item", " ", el("code", {}, t.id)),
      el("td", {}, el("code", {}, shownValue(t.before))),
      el("td", {}, el("code", {}, shownValue(t.after))),
    ),
  );
  return el("div", { class: "table-wrap", tabindex: "0" }, el("table", {}, head, el("tbody", {}, rows)));
}

async function openEvent(seq) {
  detailTitle.textContent = `Event #${seq}`;
  detail.replaceChildren(el("p", { class: "hint" }, "Loading…"));
  if (!dialog.open) dialog.showModal();
  try {
    const out = await call("get_audit_event", { seq: Number(seq) });
    const e = out.event;
    detail.replaceChildren(
      el("p", {}, e.description),
      el("dl", { class: "headers" },
        pair("When", when(e.created_at)),
        pair("Who", out.who),
        out.on_behalf_of ? pair("On behalf of", out.on_behalf_of) : [],
        pair("Door", out.door_words),
        pair("Operation", `${out.operation_words} `, el("code", {}, e.operation)),
        pair("Outcome", e.outcome === "ok" ? "done" : `refused, error code ${e.outcome}`),
      ),
      el("h3", {}, "What changed"),
      changes(e.targets),
      el("h3", {}, "In the chain"),
      el("dl", { class: "headers" },
        pair("Input digest", e.input_digest ? el("code", {}, e.input_digest) : "none (no input, or a refusal)"),
        pair("This event's hash", hashLink(out.next_seq, e.hash), out.next_seq ? " (the next event holds it)" : ""),
        pair("Previous hash", hashLink(out.previous_seq, out.prev_hash), out.previous_seq ? ` (event #${out.previous_seq})` : ""),
      ),
    );
  } catch (err) {
    detail.replaceChildren(el("p", { class: "errors" }, plainError(err, { seq: "This event" })));
  }
}

function followAddress() {
  const found = EVENT.exec(location.hash);
  if (found) openEvent(found[1]);
  else if (dialog.open) dialog.close();
}

if (dialog) {
  window.addEventListener("hashchange", () => {
    const known = history.state && history.state.eventDepth;
    depth = !EVENT.test(location.hash) ? 0 : typeof known === "number" ? known : depth + 1;
    history.replaceState({ ...(history.state || {}), eventDepth: depth }, "");
    followAddress();
  });
  dialog.addEventListener("close", () => {
    if (!EVENT.test(location.hash)) return;
    if (depth > 0) history.go(-depth);
    else history.replaceState(history.state, "", `${location.pathname}${location.search}`);
  });
  if (history.state && typeof history.state.eventDepth === "number") depth = history.state.eventDepth;
  history.replaceState({ ...(history.state || {}), eventDepth: depth }, "");
  followAddress();
}

// the address may name filters (the Keys and Connections pages link to one credential's events)
const asked = new URLSearchParams(location.search);
for (const key of ["operation", "principal", "outcome"]) {
  const field = form.elements.namedItem(key);
  if (asked.get(key) && field) field.value = asked.get(key);
}
form.elements.namedItem("reads").checked = asked.get("console_reads") === "show";
const wanted = asked.get("credential_id") ? `${asked.get("credential_kind") || "apikey"}:${asked.get("credential_id")}` : "";
fillCredentials(wanted).then(show);
