// /audit: the audit log, newest first and filtered, each event in the words list_audit_events gives; Verify walks
// the chain (verify_audit) and Export saves it as JSON lines (export_audit_chain, page after page). The page
// decides nothing: who may see which events, and how an event reads, come from the operations.
import { call, describeError, el, notice, when } from "../lib.js";

const form = document.getElementById("audit-filters");
const target = document.getElementById("audit-list");
const more = document.getElementById("audit-more");
const title = document.getElementById("audit-title");
const credentials = document.getElementById("filter-credential");
const body = el("tbody");
let cursor = null;
let filters = {};

const outcome = (e) => (e.outcome === "ok" ? "done" : el("span", { class: "status-revoked" }, `refused: ${e.outcome}`));

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
  return out;
}

async function next() {
  more.disabled = true;
  try {
    const out = await call("list_audit_events", cursor ? { ...filters, cursor } : filters);
    body.append(
      ...out.events.map((e) =>
        el("tr", { "data-seq": e.seq, "data-operation": e.operation, "data-outcome": e.outcome },
          el("td", {}, when(e.created_at)),
          el("td", {}, e.description),
          el("td", {}, outcome(e)),
          el("td", {}, el("code", { title: `hash ${e.hash}` }, `#${e.seq}`)),
        ),
      ),
    );
    if (!cursor) {
      const head = el("thead", {}, el("tr", {}, ["When", "What happened", "Outcome", "Event"].map((h) => el("th", { scope: "col" }, h))));
      target.replaceChildren(
        out.events.length
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
  body.replaceChildren();
  const chosen = credentials.selectedOptions[0];
  title.textContent = filters.credential_id && chosen && chosen.value ? `What ${chosen.textContent} did` : "Audit log";
  const query = new URLSearchParams(filters);
  history.replaceState(null, "", query.size ? `?${query}` : location.pathname);
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
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  show();
});
form.addEventListener("reset", () => setTimeout(show, 0));
more.addEventListener("click", next);

const verify = document.getElementById("verify-chain");
const result = document.getElementById("verify-result");
if (verify) {
  verify.addEventListener("click", async () => {
    verify.disabled = true;
    result.hidden = false;
    result.className = "";
    result.textContent = "Walking the chain…";
    try {
      const out = await call("verify_audit", {});
      if (out.ok) {
        result.textContent = `Intact, ${out.events_checked} events, head hash ${out.head_hash}.`;
        result.className = "status-ok";
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

const exporter = document.getElementById("export-chain");
if (exporter) {
  exporter.addEventListener("click", async () => {
    exporter.disabled = true;
    notice("Exporting the chain…");
    const lines = [];
    try {
      let page = await call("export_audit_chain", {});
      lines.push(...page.lines);
      while (page.next_cursor) {
        page = await call("export_audit_chain", { cursor: page.next_cursor });
        lines.push(...page.lines);
      }
      const file = new Blob([lines.map((line) => `${line}\n`).join("")], { type: "application/x-ndjson" });
      const link = el("a", { href: URL.createObjectURL(file), download: `audit-${exporter.dataset.tenant}.jsonl`, hidden: true });
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
      notice(`Exported ${lines.length} events, up to event #${page.head_seq}.`);
    } catch (err) {
      notice(describeError(err), true);
    } finally {
      exporter.disabled = false;
    }
  });
}

// the address may name filters (the Keys and Connections pages link to one credential's events)
const asked = new URLSearchParams(location.search);
for (const key of ["operation", "principal", "outcome"]) {
  const field = form.elements.namedItem(key);
  if (asked.get(key) && field) field.value = asked.get(key);
}
const wanted = asked.get("credential_id") ? `${asked.get("credential_kind") || "apikey"}:${asked.get("credential_id")}` : "";
fillCredentials(wanted).then(show);
