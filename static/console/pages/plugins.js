// /plugins: whether plugins run in a sandbox, the plugins Oaken refused and why, and each installed plugin's
// health, operations and this tenant's settings, as a form built from the plugin's settings schema
// (list_plugins, set_plugin_settings; the form: ../schema_form.js).
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

const sentenceEnd = (text) => (/[.!?]$/.test(text) ? text : `${text}.`);

// How plugins run here: in a sandbox, or (for development only) without one; and why none could be loaded.
function sandbox(out) {
  const said = [];
  if (out.sandbox === "none") {
    said.push(
      el(
        "div",
        { class: "warning", "data-sandbox": "none" },
        el("strong", {}, "Plugins run without a sandbox."),
        " Their code can read Oaken's files, reach its database and the network as Oaken itself. This is for " +
          "developing plugins only: never run plugins you did not write this way. An administrator of the server " +
          "turns the sandbox on by removing OAKEN_PLUGIN_SANDBOX=none.",
      ),
    );
  } else if (!out.problem) {
    said.push(
      el(
        "p",
        { class: "hint", "data-sandbox": out.sandbox },
        "Each plugin runs in a sandbox of its own (bubblewrap): no network, none of Oaken's files or data, and a " +
          "process serves one tenant only.",
      ),
    );
  }
  if (out.problem) said.push(el("p", { class: "errors", "data-problem": "" }, `No plugin could be loaded: ${sentenceEnd(out.problem)}`));
  return said;
}

function refused(out) {
  if (!out.refused || !out.refused.length) return [];
  return [
    el("h2", { id: "refused-title" }, "Refused plugins"),
    el("p", { class: "hint" }, "These plugins are installed but Oaken did not load them: they offer nothing until the reason below is fixed on the server."),
    el(
      "ul",
      { class: "refused", "aria-labelledby": "refused-title" },
      out.refused.map((r) => el("li", { "data-refused": r.name }, el("strong", {}, r.name), ": ", r.reason)),
    ),
  ];
}

const refresh = () =>
  load("list_plugins", "plugins-list", (out) =>
    el(
      "div",
      {},
      sandbox(out),
      refused(out),
      out.plugins.length
        ? out.plugins.map(section)
        : el("p", { class: "hint" }, out.problem || out.refused.length ? "No plugin is loaded." : "No plugin is installed."),
    ),
  );

refresh();
