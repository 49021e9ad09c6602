// "Undo what this assistant did since …" (/audit, /keys, /connections): the person picks an assistant and a time;
// undo_agent_actions answers with its preview (what will be undone, what is left and why, the mail it sent that
// cannot be called back), shown in the confirmation dialog; once confirmed, each reversal runs as its own call.
import { el, perform } from "./lib.js";

const form = document.getElementById("undo-form");
const select = document.getElementById("undo-credential");
const result = document.getElementById("undo-result");

// options: [{value: "apikey:<id>" or "oauth:<id>", text}], the credentials this person may see; `wanted` preselected
export function fillUndo(options, wanted) {
  if (!select) return;
  const keep = wanted || select.value;
  select.replaceChildren(
    el("option", { value: "" }, options.length ? "Choose a key or connection" : "No key or connection yet"),
    ...options.map((o) => el("option", { value: o.value }, o.text)),
  );
  if (keep && options.some((o) => o.value === keep)) select.value = keep;
}

const count = (n, one, many) => `${n} ${n === 1 ? one : many}`;

function said(out) {
  const lines = [];
  lines.push(out.undone.length ? `Undone: ${count(out.undone.length, "change", "changes")}.` : "Nothing was left to undo.");
  const why = {};
  for (const s of out.skipped) why[s.why] = (why[s.why] || 0) + 1;
  for (const [reason, n] of Object.entries(why)) lines.push(`Left as it is: ${count(n, "change", "changes")} (${reason}).`);
  for (const where of out.sent) lines.push(`Cannot be undone: ${where}.`);
  if (out.not_undoable.length) lines.push(`Cannot be undone: ${count(out.not_undoable.length, "other change", "other changes")}.`);
  return el("ul", { class: "undo-result" }, ...lines.map((line) => el("li", {}, line)));
}

if (form) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const [, id] = (select.value || ":").split(":");
    if (!id) return;
    const hours = Number(form.elements.namedItem("since").value);
    const since = new Date(Date.now() - hours * 3600 * 1000).toISOString();
    const button = form.querySelector('button[type="submit"]');
    button.disabled = true;
    try {
      const out = await perform("undo_agent_actions", { credential_id: id, since });
      if (out) result.replaceChildren(said(out));
    } finally {
      button.disabled = false;
    }
  });
}
