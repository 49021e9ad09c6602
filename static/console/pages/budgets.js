// /budgets: the send budgets in use and what they have spent, a page at a time.
import { call, describeError, el, row, when } from "../lib.js";

const kinds = { apikey: "API key", oauth: "Connection", policy: "Send policy", person: "Person" };
const target = document.getElementById("budgets-list");
const more = document.getElementById("budgets-more");
const stale = document.getElementById("budgets-stale");
const body = el("tbody");
let cursor = null;

const what = (b) => (b.prefix ? el("span", {}, b.name ? `${b.name} ` : "", el("code", {}, `${b.prefix}_…`)) : b.name || "—");
const thisHour = (b) => {
  const h = b.current_hour;
  const figure = `${h.used} of ${b.limit_per_hour} (${h.left} left)`;
  if (h.live) return figure;
  return el("span", { "data-rolled-up": true }, `${figure}, ${h.rolled_up_at ? `as rolled up ${when(h.rolled_up_at)}` : "none rolled up yet"}`);
};
const lastDay = (b) =>
  el("span", { title: b.last_24_hours.map((h) => `${when(h.starts_at)}: ${h.used}`).join("\n") || null }, String(b.used_last_24_hours));
const status = (b) => (b.active ? "active" : el("span", { class: "status-revoked" }, b.kind === "person" ? "deactivated" : "revoked or expired"));

const next = async () => {
  more.disabled = true;
  try {
    const out = await call("list_send_budgets", cursor ? { cursor } : {});
    body.append(...out.budgets.map((b) =>
      row({ "data-budget-kind": b.kind, "data-budget-id": b.id }, [kinds[b.kind] || b.kind, what(b), b.person, thisHour(b), lastDay(b), status(b)]),
    ));
    if (!cursor) {
      const headers = ["Budget", "What", "Whose", "This hour", "Last 24 hours", "Status"].map((h) => el("th", { scope: "col" }, h));
      target.replaceChildren(out.budgets.length ? el("div", { class: "table-wrap", tabindex: "0" }, el("table", {}, el("thead", {}, el("tr", {}, headers)), body)) : el("p", { class: "hint" }, "No budgets in use."));
    }
    stale.textContent = out.live ? "" : "The budget counters cannot be read right now: this hour shows the figures last rolled up.";
    stale.hidden = out.live;
    cursor = out.next_cursor;
    more.hidden = !cursor;
  } catch (err) {
    target.replaceChildren(el("p", { class: "errors" }, describeError(err)));
  } finally {
    more.disabled = false;
  }
};

more.addEventListener("click", next);
next();
