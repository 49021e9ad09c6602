// /exposure: what agents of this tenant are offered, a group at a time. The groups, their words and which
// operations each holds come from the server (list_operation_exposure); a group's switch and each operation's own
// go through set_operation_exposure, which asks first and says what will change.
import { button, el, load, perform, row, table } from "../lib.js";

const set = async (target, level, what) => {
  const done = level === "on" ? `${what} is now offered to agents.` : `${what} is no longer offered to agents.`;
  if (await perform("set_operation_exposure", { operation: target, level }, done)) refresh();
};

const action = (op) => {
  if (op.ceiling === "never") return el("span", { class: "hint" }, "never offered");
  return op.offered_to_agents
    ? button("Stop offering", () => set(op.name, "off", `“${op.name}”`), { "data-action": "off", "aria-label": `Stop offering ${op.name}` })
    : button("Offer", () => set(op.name, "on", `“${op.name}”`), { "data-action": "on", "aria-label": `Offer ${op.name}` });
};

const state = (g) => {
  if (!g.switch) return "Never offered to agents.";
  if (g.offered === 0) return "Not offered to agents.";
  if (g.offered === g.operations) return "Offered to agents.";
  return `Offered to agents in part: ${g.offered} of ${g.operations}.`;
};

const switches = (g) => {
  if (!g.switch) return [];
  const out = [];
  if (g.offered < g.operations) out.push(button("Offer to agents", () => set(g.switch, "on", `“${g.title}”`), { "data-group-action": "on" }));
  if (g.offered > 0) out.push(" ", button("Stop offering", () => set(g.switch, "off", `“${g.title}”`), { "data-group-action": "off" }));
  return out;
};

// the groups whose operations the person unfolded stay unfolded when the list is drawn again
const unfolded = new Set();
const fold = (key, ...children) => {
  const details = el("details", { open: unfolded.has(key) }, ...children);
  details.addEventListener("toggle", () => (details.open ? unfolded.add(key) : unfolded.delete(key)));
  return details;
};

const group = (g, ops) =>
  el(
    "section",
    { "data-group": g.key, "data-plugin": g.key.startsWith("plugin:") ? g.key.slice(7) : "" },
    el("h2", {}, g.title),
    el("p", {}, g.explanation),
    el("p", { class: "hint", "data-state": "" }, state(g)),
    el("p", { class: "actions" }, switches(g)),
    fold(
      g.key,
      el("summary", {}, `The ${ops.length === 1 ? "operation" : `${ops.length} operations`} it holds`),
      table(
        ["Operation", "What it does", "Offered to agents", ""],
        ops.map((op) =>
          row({ "data-operation": op.name }, [el("code", {}, op.name), op.summary, op.ceiling === "never" ? "never" : op.offered_to_agents ? "yes" : "no", action(op)]),
        ),
      ),
    ),
  );

const refresh = () =>
  load("list_operation_exposure", "exposure-list", (out) =>
    el("div", {}, out.groups.map((g) => group(g, out.operations.filter((op) => op.group === g.key)))),
  );

refresh();
