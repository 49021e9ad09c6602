// /plugins: each installed plugin's health, operations and this tenant's settings, as a form built from the
// plugin's settings schema (list_plugins, set_plugin_settings; the form: ../schema_form.js).
import { el, load, notice, perform, plainError, row, table } from "../lib.js";
import { FormProblem, SchemaForm } from "../schema_form.js";

function settingsForm(plugin) {
  const schema = plugin.settings_schema || {};
  if (!schema.properties || !Object.keys(schema.properties).length) return el("p", { class: "hint" }, "This plugin has no settings.");
  const fields = new SchemaForm(`setting-${plugin.name}`, schema);
  const form = el("form", { id: `settings-${plugin.name}`, class: "plugin-settings", "data-plugin": plugin.name, novalidate: "" });
  form.append(...fields.build(plugin.settings), el("button", { type: "submit" }, "Save settings"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    fields.clearProblems(form);
    let values;
    try {
      values = fields.read();
    } catch (err) {
      if (!(err instanceof FormProblem)) throw err;
      const place = fields.say(err.path, err.message);
      notice(`Nothing was saved: ${err.message}`, true);
      if (place && place.input) place.input.focus();
      return;
    }
    const shown = (error) => {
      // the refusal names the setting (settings.mirrors.1.password): the reason goes next to it, in words
      const path = (error.field || "").replace(/^settings\.?/, "").split(".").filter(Boolean);
      const place = fields.placeFor(path);
      if (!place) return;
      const sentence = plainError(error, { [error.field]: place.said() });
      fields.say(path, sentence);
      notice(`Nothing was saved: ${sentence}`, true);
    };
    const submit = form.querySelector('button[type="submit"]');
    submit.disabled = true;
    try {
      const saved = await perform("set_plugin_settings", { plugin: plugin.name, settings: values }, `The settings of ${plugin.name} are saved.`, shown);
      if (saved) refresh();
    } finally {
      submit.disabled = false;
    }
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
