// /exposure: which operations agents of this tenant are offered, plugins grouped.
import { button, el, load, perform, row, table } from "../lib.js";

const set = async (target, level) => {
  if (await perform("set_operation_exposure", { operation: target, level }, `${target} is now ${level}.`)) refresh();
};

const action = (op) => {
  if (op.ceiling === "never") return el("span", { class: "hint" }, "never offered");
  return op.offered_to_agents
    ? button("Stop offering", () => set(op.name, "off"), { "data-action": "off" })
    : button("Offer", () => set(op.name, "on"), { "data-action": "on" });
};

const group = (title, plugin, ops) => {
  const header = [el("h2", {}, title)];
  if (plugin) {
    header.push(
      el("p", { class: "hint" }, "A plugin's operations start off. Switching the plugin off withdraws all of them at once."),
      button("Switch the whole plugin off", () => set(`plugin:${plugin}`, "off")),
      " ",
      button("Lift the plugin switch", () => set(`plugin:${plugin}`, "on")),
    );
  }
  return el(
    "section",
    { "data-plugin": plugin || "" },
    header,
    table(
      ["Operation", "Class", "Ceiling", "This tenant's setting", "Offered to agents", ""],
      ops.map((op) =>
        row({ "data-operation": op.name }, [el("code", {}, op.name), op.op_class, op.ceiling, op.setting || "default", op.offered_to_agents ? "yes" : "no", action(op)]),
      ),
    ),
  );
};

const refresh = () =>
  load("list_operation_exposure", "exposure-list", (out) => {
    const groups = new Map();
    for (const op of out.operations) {
      const key = op.plugin || "";
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(op);
    }
    const keys = [...groups.keys()].sort();
    return el("div", {}, keys.map((k) => group(k ? `Plugin: ${k}` : "Built-in operations", k, groups.get(k))));
  });

refresh();
