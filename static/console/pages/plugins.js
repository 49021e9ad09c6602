// /plugins: the installed plugins, their health and operations, and this tenant's settings for each, as a
// form built from the plugin's settings schema (list_plugins, set_plugin_settings).
import { el, load, notice, perform, plainError, row, table } from "../lib.js";

const MASK = "********";

const isSecret = (spec) => [spec, ...(spec.anyOf || [])].some((s) => s && s.format === "password");
const typeOf = (spec) => spec.type || ((spec.anyOf || []).find((s) => s.type && s.type !== "null") || {}).type;
const labelOf = (name, spec) => spec.title || name.replace(/_/g, " ");

// One input for one setting: a checkbox, a list of choices, a number, a secret or text.
function field(plugin, name, spec, value) {
  const id = `setting-${plugin}-${name}`;
  const hint = el("span", { class: "hint", id: `${id}-hint` }, spec.description || "");
  const problem = el("span", { class: "errors", id: `${id}-problem`, hidden: "" });
  const described = `${id}-hint ${id}-problem`;
  let input;
  const kind = typeOf(spec);
  if (kind === "boolean") {
    input = el("input", { type: "checkbox", id, name, "aria-describedby": described });
    input.checked = value === undefined ? Boolean(spec.default) : Boolean(value);
  } else if (spec.enum) {
    input = el("select", { id, name, "aria-describedby": described }, spec.enum.map((v) => el("option", { value: String(v) }, String(v))));
    input.value = String(value ?? spec.default ?? spec.enum[0]);
  } else if (kind === "integer" || kind === "number") {
    const attrs = { type: "number", id, name, "aria-describedby": described, step: kind === "integer" ? "1" : "any" };
    if (spec.minimum !== undefined) attrs.min = String(spec.minimum);
    if (spec.maximum !== undefined) attrs.max = String(spec.maximum);
    input = el("input", attrs);
    input.value = value ?? spec.default ?? "";
  } else if (isSecret(spec)) {
    input = el("input", { type: "password", id, name, autocomplete: "off", "aria-describedby": described });
    input.placeholder = value ? "set (leave empty to keep it)" : "not set";
    input.dataset.secret = value ? "set" : "";
  } else {
    input = el("input", { type: "text", id, name, "aria-describedby": described });
    if (spec.maxLength !== undefined) input.maxLength = spec.maxLength;
    input.value = value ?? spec.default ?? "";
  }
  input.dataset.kind = kind || "string";
  return el("p", { class: "field" }, el("label", { for: id }, labelOf(name, spec)), " ", input, " ", hint, " ", problem);
}

// What the form says, as the plugin's settings: a secret left empty keeps its value (sent as the mask).
function valuesOf(form, properties) {
  const values = {};
  for (const name of Object.keys(properties)) {
    const input = form.elements.namedItem(name);
    if (!input) continue;
    if (input.type === "checkbox") values[name] = input.checked;
    else if (input.type === "password") {
      if (input.value) values[name] = input.value;
      else if (input.dataset.secret) values[name] = MASK;
    } else if (input.dataset.kind === "integer" || input.dataset.kind === "number") {
      if (input.value !== "") values[name] = Number(input.value);
    } else values[name] = input.value;
  }
  return values;
}

function settingsForm(plugin) {
  const properties = (plugin.settings_schema && plugin.settings_schema.properties) || {};
  const names = Object.keys(properties);
  if (!names.length) return el("p", { class: "hint" }, "This plugin has no settings.");
  const form = el("form", { id: `settings-${plugin.name}`, "data-plugin": plugin.name, novalidate: "" });
  form.append(
    ...names.map((name) => field(plugin.name, name, properties[name], plugin.settings[name])),
    el("button", { type: "submit" }, "Save settings"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    form.querySelectorAll(".field .errors").forEach((p) => {
      p.hidden = true;
      p.textContent = "";
    });
    const shown = (error) => {
      // the refusal names the setting: the reason goes next to it, in words (never the field's path)
      const name = (error.field || "").replace(/^settings\./, "");
      const problem = document.getElementById(`setting-${plugin.name}-${name}-problem`);
      if (!problem) return;
      const sentence = plainError(error, { [error.field]: labelOf(name, properties[name] || {}) });
      problem.textContent = sentence;
      problem.hidden = false;
      notice(`Nothing was saved: ${sentence}`, true);
    };
    const saved = await perform(
      "set_plugin_settings",
      { plugin: plugin.name, settings: valuesOf(form, properties) },
      `The settings of ${plugin.name} are saved.`,
      shown,
    );
    if (saved) refresh();
  });
  return form;
}

const section = (plugin) =>
  el(
    "section",
    { "data-plugin": plugin.name },
    el("h2", {}, `${plugin.name} `, el("span", { class: "hint" }, `version ${plugin.version}`)),
    el(
      "p",
      { class: plugin.healthy ? "hint" : "errors", "data-health": plugin.healthy ? "healthy" : "unhealthy" },
      plugin.healthy ? "Working." : "Not working: its health check fails, so it offers nothing until it passes again.",
    ),
    table(
      ["Operation", "Class", "Agents"],
      plugin.operations.map((op) =>
        row({ "data-operation": op.name }, [el("code", {}, op.name), op.op_class, op.exposure === "on" ? "offered" : "not offered"]),
      ),
    ),
    el("h3", {}, "Settings"),
    settingsForm(plugin),
  );

const refresh = () =>
  load("list_plugins", "plugins-list", (out) =>
    out.plugins.length
      ? el("div", {}, out.plugins.map(section))
      : el("p", { class: "hint" }, "No plugin is installed."),
  );

refresh();
