// /keys: the person's API keys (a new key is shown once, right after it is created), and their webhooks' states.
import { auditLink, button, el, list, load, names, notice, onSubmit, perform, row, table, when } from "../lib.js";
import { fillUndo } from "../undo.js";

const status = (k) => {
  if (k.revoked) return el("span", { class: "status-revoked" }, "revoked");
  if (k.expires_at && new Date(k.expires_at) <= new Date()) return el("span", { class: "status-expired" }, "expired");
  return "active";
};

// the keys that may have acted, for "Undo what this assistant did since …"
const undoable = (out) => {
  if (out) fillUndo(out.api_keys.map((k) => ({ value: `apikey:${k.id}`, text: `API key ${k.name || "unnamed"} (${k.prefix}_…)` })));
};

const listKeys = () =>
  load("list_api_keys", "keys-list", (out) =>
    out.api_keys.length
      ? table(
          ["Name", "Prefix", "Permissions", "Workspaces", "Operations", "Lockdown", "Created", "Expires", "Last used", "Status", ""],
          out.api_keys.map((k) =>
            row({ "data-key-id": k.id, "data-prefix": k.prefix }, [
              k.name || "—",
              el("code", {}, `${k.prefix}_…`),
              list(k.scopes),
              list(k.workspaces, "every workspace"),
              k.tool_set
                ? `the set ${k.tool_set}`
                : k.operations
                  ? list(k.operations, "none")
                  : "all its permissions allow",
              k.lockdown ? el("span", { class: "status-expired" }, "on") : "off",
              when(k.created_at),
              k.expires_at ? when(k.expires_at) : "never",
              k.last_used_at ? when(k.last_used_at) : "never",
              status(k),
              el("span", { class: "row-actions" },
                auditLink("apikey", k.id, k.name || k.prefix),
                k.revoked ? "" : button(k.lockdown ? "Lift lockdown" : "Lock down", () => lockdown(k), { "data-action": "lockdown" }),
                k.revoked ? "" : button("Revoke", () => revoke(k), { "data-action": "revoke" }),
              ),
            ]),
          ),
        )
      : el("p", { class: "hint" }, "No keys yet."),
  );

const refresh = () => listKeys().then(undoable);

const hookState = (h) => {
  if (h.state === "disabled")
    return el("span", { class: "status-revoked" }, h.disabled_reason === "failing" ? "disabled: failed for a day" : "disabled");
  return h.failing_since ? el("span", { class: "status-expired" }, `failing since ${when(h.failing_since)}`) : "active";
};

const refreshHooks = () =>
  load("list_webhooks", "webhooks-list", (out) =>
    out.webhooks.length
      ? table(
          ["Endpoint", "Events", "Workspaces", "Waiting", "Last delivered", "Status", ""],
          out.webhooks.map((h) =>
            row({ "data-webhook-id": h.id }, [
              el("code", {}, new URL(h.url).host),
              list(h.types, "every event"),
              list(h.workspaces, "every workspace"),
              String(h.pending),
              h.last_success_at ? when(h.last_success_at) : "never",
              hookState(h),
              el("span", { class: "row-actions" },
                h.mine ? button(h.state === "active" ? "Disable" : "Enable", () => toggle(h), { "data-action": "toggle" }) : "",
              ),
            ]),
          ),
        )
      : el("p", { class: "hint" }, "No webhooks."),
  );

const toggle = async (h) => {
  const enabled = h.state !== "active";
  const done = enabled ? "The webhook delivers again." : "The webhook is disabled.";
  if (await perform("update_webhook", { webhook_id: h.id, enabled }, done)) refreshHooks();
};

// lockdown: once the key has read mail from someone nobody here has written to, a person decides its every request
const lockdown = async (k) => {
  const done = k.lockdown ? `Key ${k.prefix} is no longer in lockdown.` : `Key ${k.prefix} is in lockdown.`;
  if (await perform("set_api_key_lockdown", { api_key_id: k.id, lockdown: !k.lockdown }, done)) refresh();
};

const revoke = async (k) => {
  if (await perform("revoke_api_key", { api_key_id: k.id }, `Key ${k.prefix} is revoked.`)) refresh();
};

const shown = document.getElementById("new-key");
const value = document.getElementById("new-key-value");

document.getElementById("copy-key").addEventListener("click", async () => {
  const result = document.getElementById("copy-result");
  try {
    await navigator.clipboard.writeText(value.textContent);
    result.textContent = "Copied.";
  } catch (_) {
    const range = document.createRange();
    range.selectNodeContents(value);
    window.getSelection().removeAllRanges();
    window.getSelection().addRange(range);
    result.textContent = "Selected: press Ctrl+C (⌘C) to copy.";
  }
});

onSubmit("create-key", async (form) => {
  const data = new FormData(form);
  const body = {
    name: (data.get("name") || "").trim(),
    scopes: [...form.querySelectorAll('input[name="scopes"]:checked')].map((i) => i.value),
    workspaces: names(data.get("workspaces") || ""),
  };
  const toolSet = data.get("tool_set") || "";
  if (toolSet) body.tool_set = toolSet;
  const operations = names(data.get("operations") || "");
  if (operations.length) body.operations = operations;
  if (data.get("lockdown")) body.lockdown = true;
  const days = (data.get("expires_in_days") || "").trim();
  if (days) body.expires_in_days = Number(days);
  const out = await perform("create_api_key", body);
  if (!out) return;
  value.textContent = out.key;
  shown.hidden = false;
  document.getElementById("copy-result").textContent = "";
  form.reset();
  notice(`Key ${out.api_key.prefix} is created.`);
  shown.scrollIntoView();
  refresh();
  refreshSets();
  refreshHooks();
});

// the tool sets: listed with their tools, offered in the key form, defined and deleted here
const setChoice = document.getElementById("key-tool-set");

const refreshSets = async () => {
  const out = await load("list_tool_sets", "tool-sets-list", (listed) =>
    table(
      ["Name", "What it allows", "Tools", "Used by", ""],
      listed.tool_sets.map((s) =>
        row({ "data-tool-set": s.name }, [
          s.built_in ? `${s.name} (built in)` : s.name,
          s.description,
          list(s.operations, "none"),
          s.in_use ? `${s.in_use} key${s.in_use === 1 ? "" : "s"} or connection${s.in_use === 1 ? "" : "s"}` : "none",
          s.built_in ? "" : button("Delete", () => deleteSet(s), { "data-action": "delete-tool-set" }),
        ]),
      ),
    ),
  );
  if (!out) return;
  const chosen = setChoice.value;
  setChoice.replaceChildren(
    el("option", { value: "" }, "None: every tool its permissions allow"),
    ...out.tool_sets.map((s) => el("option", { value: s.name }, s.built_in ? `${s.name} (built in)` : s.name)),
  );
  setChoice.value = out.tool_sets.some((s) => s.name === chosen) ? chosen : "";
};

const deleteSet = async (s) => {
  if (await perform("delete_tool_set", { name: s.name }, `The tool set ${s.name} is deleted.`)) refreshSets();
};

onSubmit("create-tool-set", async (form) => {
  const data = new FormData(form);
  const body = { name: (data.get("name") || "").trim(), operations: names(data.get("operations") || "") };
  const out = await perform("create_tool_set", body);
  if (!out) return;
  form.reset();
  notice(`The tool set ${out.name} is defined.`);
  refreshSets();
});

refresh();
refreshSets();
refreshHooks();
