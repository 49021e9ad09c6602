// /rules: the rules of the workspaces this person reaches, in the order they run (list_rules), each with what it
// does in words, whether it runs (and why not, when stopped), its last error, how often it acted and whose authority
// it acts with; turning one on or off (update_rule), moving it up or down (reorder_rules), deleting it
// (delete_rule), running it on existing mail (apply_rule) and what it did (get_rule's history). The editor builds a
// rule's input (its conditions and actions are the shapes the operations take), tries it on past mail before it is
// saved (test_rule: the matches and why) and saves it (create_rule, update_rule) through the gate's proposal, which
// says what it would have done to the last 30 days. The page decides nothing of its own: it says what the operations
// answer, and a refusal beside the field it names. list_accounts names the mailboxes.
import { button, call, el, notice, perform, plainError, row, showHistory, table, when } from "../lib.js";
import { HEADERS, actionWords, conditionWords, labelNames, outcomeWords } from "./mail-rules.js";

const listBox = document.getElementById("rules-list");
const historySection = document.getElementById("rule-history");
const historyTitle = document.getElementById("rule-history-title");
const historyBody = document.getElementById("rule-history-body");
const form = document.getElementById("rule-editor");

let accounts = new Map(); // id -> account (list_accounts)
let labels = []; // list_labels: what a label condition can name

// a label as the editor offers it: its name, and its mailbox's when there are several
const labelChoices = () =>
  labels.map((l) => [l.id, accounts.size > 1 ? `${l.name} (${accountName(l.account_id)})` : l.name + (l.ai_state === "on" ? " (AI label)" : "")]);
let rules = [];

const accountName = (id) => {
  const a = accounts.get(id);
  return a ? (a.email_address ? `${a.name} (${a.email_address})` : a.name) : "a mailbox you do not reach";
};
const scopeWords = (r) => (r.account_id ? `The mailbox ${accountName(r.account_id)}` : `Every mailbox of ${r.workspace}`);

// ------------------------------------------------------------ a rule in words (its own terms, as stored)

const STOPPED = {
  owner_left: "Stopped: its owner left this tenant. Turn it on again to run it as you.",
  owner_lost_workspace: "Stopped: its owner no longer reaches this workspace. Turn it on again to run it as you.",
};


function stateCell(r) {
  if (r.stopped) return el("span", { class: "rule-stopped" }, STOPPED[r.stopped] || `Stopped (${r.stopped}). Turn it on again to run it as you.`);
  return el("span", {},
    el("span", { class: r.enabled ? "status-ok" : "hint" }, r.enabled ? "On" : "Off"),
    forwardState(r),
  );
}

// a forwarding rule's approval: it forwards only what a person approved, exactly as the rule is now
function forwardState(r) {
  if (!r.actions.some((a) => a.action === "forward")) return null;
  if (r.forward_state === "active") return el("div", { class: "hint" }, "Forwards as you approved it.");
  if (r.forward_state === "awaiting_approval")
    return el("div", { class: "rule-stopped" }, "Forwards nothing until a person ", el("a", { href: r.approval_url }, "approves the forward"), ".");
  return el("div", { class: "rule-stopped" }, "Forwards nothing: its forward was cancelled. Save the rule again to approve it.");
}

// its last failing action, under its state
const errorCell = (r) => (r.last_error ? el("div", { class: "errors rule-error" }, `Last error: ${outcomeWords(r.last_error)}, ${when(r.last_error_at)}`) : null);

const whenCell = (r) =>
  el("div", {},
    el("span", { class: "hint" }, r.match === "all" ? "All of: " : "Any of: "),
    el("ul", { class: "rule-terms" }, r.conditions.map((c) => el("li", {}, conditionWords(c)))),
  );
const thenCell = (r) => el("ul", { class: "rule-terms" }, r.actions.map((a) => el("li", {}, actionWords(a))));

// ------------------------------------------------------------ the list, per workspace

async function refresh() {
  try {
    rules = (await call("list_rules", {})).rules;
  } catch (err) {
    listBox.replaceChildren(el("p", { class: "errors" }, plainError(err)));
    return;
  }
  if (!rules.length) {
    listBox.replaceChildren(el("p", { class: "hint" }, "No rule yet: create one below, and test it on past mail first."));
    return;
  }
  const byWorkspace = new Map();
  for (const r of rules) {
    if (!byWorkspace.has(r.workspace)) byWorkspace.set(r.workspace, []);
    byWorkspace.get(r.workspace).push(r);
  }
  const parts = [];
  for (const [workspace, own] of byWorkspace) {
    own.sort((a, b) => a.position - b.position);
    if (byWorkspace.size > 1) parts.push(el("h2", {}, `Workspace ${workspace}`));
    parts.push(
      table(
        ["Order", "Rule", "When", "Then", "State", "Acted on", "Owner", ""],
        own.map((r, i) =>
          row({ "data-rule-id": r.id }, [
            String(i + 1),
            el("div", {}, el("strong", {}, r.name), el("div", { class: "hint" }, scopeWords(r))),
            whenCell(r),
            thenCell(r),
            el("div", {}, stateCell(r), errorCell(r)),
            `${r.applied_count} ${r.applied_count === 1 ? "message" : "messages"}`,
            r.owner,
            actionsCell(r, own, i),
          ]),
        ),
      ),
    );
  }
  listBox.replaceChildren(...parts);
}

function actionsCell(r, own, i) {
  const on = r.enabled && !r.stopped;
  const days = el("input", { type: "number", min: "1", step: "1", value: "30", id: `apply-days-${r.id}`, class: "apply-days" });
  const apply = el("form", { class: "apply-rule", id: `apply-${r.id}`, "data-rule-id": r.id, hidden: true },
    el("label", { for: `apply-days-${r.id}` }, "Mail of how many days back"),
    days,
    el("button", { type: "submit" }, "Apply"),
  );
  apply.addEventListener("submit", async (event) => {
    event.preventDefault();
    const out = await perform("apply_rule", { rule_id: r.id, days: Number(days.value) });
    if (out) {
      notice(`${out.queued} ${out.queued === 1 ? "message waits" : "messages wait"} for the rule ${r.name}: it acts on them within seconds.`);
      refresh();
    }
  });
  return el("div", { class: "row-actions rule-actions" },
    button("Edit", () => edit(r), { class: "edit-rule", "aria-label": `Edit ${r.name}` }),
    button("History", () => showRuleHistory(r), { class: "rule-history-open", "aria-label": `History of ${r.name}` }),
    button(on ? "Turn off" : "Turn on", () => toggle(r, !on), { class: "toggle-rule", "aria-label": `${on ? "Turn off" : "Turn on"} ${r.name}` }),
    i > 0 ? button("Up", () => move(own, i, -1), { class: "rule-up", "aria-label": `Move ${r.name} up` }) : null,
    i < own.length - 1 ? button("Down", () => move(own, i, 1), { class: "rule-down", "aria-label": `Move ${r.name} down` }) : null,
    button("Apply to existing mail", (event) => {
      apply.hidden = !apply.hidden;
      event.currentTarget.setAttribute("aria-expanded", String(!apply.hidden));
      if (!apply.hidden) days.focus();
    }, { class: "apply-open", "aria-label": `Apply to existing mail: ${r.name}`, "aria-expanded": "false", "aria-controls": `apply-${r.id}` }),
    button("Delete", () => remove(r), { "data-action": "delete", "aria-label": `Delete ${r.name}` }),
    apply,
  );
}

async function toggle(r, enabled) {
  const out = await perform("update_rule", { rule_id: r.id, enabled });
  if (out) {
    notice(enabled ? `The rule ${r.name} is on.` : `The rule ${r.name} is off: it acts on nothing.`);
    refresh();
  }
}

async function move(own, i, by) {
  const order = own.map((r) => r.id);
  [order[i], order[i + by]] = [order[i + by], order[i]];
  const out = await perform("reorder_rules", { workspace: own[i].workspace, rule_ids: order });
  if (out) {
    notice("The rules run in the new order.");
    refresh();
  }
}

async function remove(r) {
  if (await perform("delete_rule", { rule_id: r.id }, `The rule ${r.name} is deleted.`)) {
    if (historySection && historySection.dataset.ruleId === r.id) historySection.hidden = true;
    refresh();
  }
}

// ------------------------------------------------------------ what a rule did (get_rule's history)

function showRuleHistory(r) {
  historySection.dataset.ruleId = r.id;
  return showHistory({
    section: historySection, title: historyTitle, body: historyBody,
    heading: `What ${r.name} did`,
    op: "get_rule", input: { rule_id: r.id },
    none: "It has not acted on any message yet.",
    item: (h) =>
      el("li", { "data-message-id": h.message_id || "" },
        el("strong", { dir: "auto" }, h.message_id ? h.subject || "(no subject)" : "(a message since deleted)"),
        el("span", { class: "hint" }, ` ${when(h.applied_at)}, version ${h.version}`),
        el("div", {}, "Because ", h.matched.join("; ") || "—"),
        el("div", {}, "It did: ", h.actions.map((a) => `${a.action} (${outcomeWords(a.outcome)})`).join(", ") || "nothing"),
      ),
  });
}

const closeHistory = document.getElementById("rule-history-close");
if (closeHistory) closeHistory.addEventListener("click", () => { historySection.hidden = true; });

// ------------------------------------------------------------ the editor: building a rule's input

const CONDITION_KINDS = [
  ["from", "From"],
  ["to", "To or Cc"],
  ["subject", "Subject"],
  ["body", "Text"],
  ["list_id", "List-Id"],
  ["header", "A header"],
  ["attachment", "Attachment"],
  ["folder", "Folder"],
  ["age", "Age"],
  ["about", "About (by meaning)"],
  ["label", "Carries a label (or AI label)"],
];
const ACTION_KINDS = [
  ["add_label", "Add a label"],
  ["remove_label", "Remove a label"],
  ["move", "Move to a folder"],
  ["mark_read", "Mark read"],
  ["pin", "Pin"],
  ["skip_inbox", "Skip the inbox"],
  ["snooze", "Snooze"],
  ["stop", "Stop: no later rule"],
  ["forward", "Forward to an address"],
];

let serial = 0;
const options = (pairs, chosen) => pairs.map(([value, words]) => el("option", { value, selected: value === chosen }, words));

// one input of a part of a rule: its label and control, by key (the key the operation takes)
function field(id, key, words, control) {
  control.id = id;
  control.dataset.key = key;
  return el("span", { class: "rule-field" }, el("label", { for: id }, words), control);
}
const text = (value, placeholder) => el("input", { type: "text", maxlength: "200", value: value || "", placeholder: placeholder || null });
const number = (value, attrs) => el("input", { type: "number", step: "1", value: String(value), ...attrs });
const choose = (pairs, chosen) => el("select", {}, options(pairs, chosen));

// the inputs a condition of this kind takes, filled from `c` (a stored condition, or nothing)
function conditionInputs(id, kind, c) {
  c = c && c.field === kind ? c : {};
  switch (kind) {
    case "from":
    case "to":
      return [
        field(`${id}-op`, "op", "How", choose([["is", "is the address"], ["domain", "is in the domain"], ["contains", "contains"]], c.op || "is")),
        field(`${id}-value`, "value", "Address, domain or words", text(c.value, kind === "from" ? "e.g. shop.example" : "e.g. team@example.com")),
      ];
    case "subject":
    case "body":
    case "list_id":
      return [
        field(`${id}-op`, "op", "How", choose([["contains", "contains"], ["is", "is exactly"]], c.op || "contains")),
        field(`${id}-value`, "value", "Words", text(c.value)),
      ];
    case "header":
      return [
        field(`${id}-name`, "name", "Header", choose(Object.entries(HEADERS), c.name || "list-unsubscribe")),
        field(`${id}-op`, "op", "How", choose([["contains", "contains"], ["is", "is exactly"], ["present", "is present"]], c.op || "present")),
        field(`${id}-value`, "value", "Words (not for “is present”)", text(c.value)),
      ];
    case "attachment":
      return [field(`${id}-type`, "type", "Type", text(c.type || "*", "application/pdf, image/*, .pdf or * for any"))];
    case "folder":
      return [field(`${id}-value`, "value", "Folder", text(c.value || "inbox", "inbox, archive, spam, trash or a folder's name"))];
    case "age":
      return [
        field(`${id}-op`, "op", "How", choose([["older_than", "older than"], ["newer_than", "newer than"]], c.op || "older_than")),
        field(`${id}-days`, "days", "Days", number(c.days ?? 7, { min: "0" })),
      ];
    case "about":
      return [
        field(`${id}-text`, "text", "About", text(c.text, "e.g. invoices and receipts")),
        field(`${id}-threshold`, "threshold", "Least likeness (0 to 1)", el("input", { type: "number", min: "0", max: "1", step: "0.05", value: c.threshold ?? "", placeholder: "the default" })),
      ];
    case "label":
      return [field(`${id}-label`, "label_id", "Label", choose(labelChoices(), c.label_id))];
    default:
      return [];
  }
}

function actionInputs(id, kind, a) {
  a = a && a.action === kind ? a : {};
  switch (kind) {
    case "add_label":
    case "remove_label":
      return [field(`${id}-label`, "label", "Label", text(a.label))];
    case "move":
      return [field(`${id}-folder`, "folder", "Folder", text(a.folder || "archive", "archive, spam, trash, inbox or a folder's name"))];
    case "snooze":
      return [field(`${id}-days`, "days", "Days", number(a.days ?? 7, { min: "1", max: "366" }))];
    case "forward": {
      const to = el("input", { type: "email", maxlength: "320", value: a.to || "", placeholder: "e.g. assistant@example.com", autocomplete: "off" });
      return [field(`${id}-to`, "to", "To (sent by itself: it needs a person's approval)", to)];
    }
    default:
      return [];
  }
}

// a row of the editor (a condition or an action): a kind select, the inputs that kind takes, Remove, its error
function partRow(what, kinds, inputsFor, initialKind, initial) {
  const id = `rule-${what}-${++serial}`;
  const kind = choose(kinds, initialKind);
  kind.id = `${id}-kind`;
  kind.dataset.kind = "1";
  const inputs = el("span", { class: "rule-inputs" }, inputsFor(id, initialKind, initial));
  const error = el("p", { class: "errors", hidden: true });
  const box = el("div", { class: `rule-part rule-${what}`, id },
    el("span", { class: "rule-field" }, el("label", { for: kind.id }, what === "condition" ? "Condition" : "Action"), kind),
    inputs,
    el("button", { type: "button", class: "remove-part", onclick: () => box.remove() }, "Remove"),
    error,
  );
  kind.addEventListener("change", () => inputs.replaceChildren(...inputsFor(id, kind.value, null)));
  return box;
}

const conditionRows = document.getElementById("rule-condition-rows");
const actionRows = document.getElementById("rule-action-rows");
const addCondition = (c) => conditionRows.append(partRow("condition", CONDITION_KINDS, conditionInputs, c ? c.field : "from", c));
const addAction = (a) => actionRows.append(partRow("action", ACTION_KINDS, actionInputs, a ? a.action : "add_label", a));

// a row's part as the operation takes it: its kind, and each input by its key (numbers as numbers; a number left
// empty is left out, so the operation's own default applies, or it says the number is required)
function partOf(box, kindKey) {
  const out = { [kindKey]: box.querySelector("select[data-kind]").value };
  for (const control of box.querySelectorAll(".rule-inputs [data-key]")) {
    if (control.type !== "number") out[control.dataset.key] = control.value;
    else if (control.value !== "") out[control.dataset.key] = Number(control.value);
  }
  return out;
}

let editing = null; // the rule being changed, or null for a new one

function body() {
  return {
    match: form.elements.namedItem("match").value,
    conditions: [...conditionRows.children].map((b) => partOf(b, "field")),
    actions: [...actionRows.children].map((b) => partOf(b, "action")),
  };
}

// where the rule applies, as test_rule and create_rule take it
function scope() {
  if (editing) return editing.account_id ? { account_id: editing.account_id } : { workspace: editing.workspace };
  const [kind, value] = form.elements.namedItem("scope").value.split(":");
  return kind === "account" ? { account_id: value } : { workspace: value };
}

// ------------------------------------------------------------ refusals beside the field they name

function clearErrors() {
  for (const slot of form.querySelectorAll(".errors")) {
    slot.textContent = "";
    slot.hidden = true;
  }
}

function showError(error) {
  const f = error.field || "";
  const part = f.match(/^(conditions|actions)\.(\d+)(?:\.(.+))?$/);
  let slot = null;
  let labels = {};
  if (part) {
    const rows = part[1] === "conditions" ? conditionRows : actionRows;
    const box = rows.children[Number(part[2])];
    const which = `${part[1] === "conditions" ? "Condition" : "Action"} ${Number(part[2]) + 1}`;
    labels = { [f]: part[3] ? `${which}: ${part[3].split(".").pop().replace(/_/g, " ")}` : which };
    if (box) {
      slot = box.querySelector(".errors");
      const input = part[3] ? box.querySelector(`[data-key="${CSS.escape(part[3].split(".").pop())}"]`) : null;
      if (input) input.focus();
    }
  } else {
    const key = f === "account_id" || f === "workspace" ? "scope" : f;
    slot = form.querySelector(`[data-error-for="${CSS.escape(key)}"]`);
    labels = { name: "The name", account_id: "The mailbox", workspace: "The workspace", days: "Days back", conditions: "Conditions", actions: "Actions" };
  }
  slot = slot || form.querySelector('[data-error-for=""]');
  slot.textContent = plainError(error, labels);
  slot.hidden = false;
}

// ------------------------------------------------------------ Test: test_rule with the rule as it stands

async function test() {
  clearErrors();
  const result = document.getElementById("rule-test-result");
  const days = Number(form.elements.namedItem("days").value);
  result.replaceChildren(el("p", { class: "hint" }, "Testing…"));
  let out;
  try {
    out = await call("test_rule", { ...scope(), ...body(), days, limit: 20 });
  } catch (err) {
    result.replaceChildren();
    showError(err.error || err);
    return;
  }
  const read = out.complete
    ? `It read all ${out.scanned} ${out.scanned === 1 ? "message" : "messages"} of the last ${days} days`
    : `It read the newest ${out.scanned} messages of the last ${days} days (not all of them)`;
  const found = `${read}: ${out.matched} ${out.matched === 1 ? "matches" : "match"}.`;
  if (!out.matches.length) {
    result.replaceChildren(el("p", { class: "rule-test-summary" }, found));
    return;
  }
  result.replaceChildren(
    el("p", { class: "rule-test-summary" }, found, out.matched > out.matches.length ? ` The newest ${out.matches.length}:` : ""),
    table(
      ["Subject", "From", "Date", "Why"],
      out.matches.map((m) =>
        row({ "data-message-id": m.message_id }, [
          el("bdi", {}, m.subject || "(no subject)"),
          el("bdi", {}, m.sender || "—"),
          when(m.date),
          m.why.join("; "),
        ]),
      ),
    ),
  );
}

// ------------------------------------------------------------ Save: create_rule or update_rule, confirmed

function reset() {
  editing = null;
  form.reset();
  conditionRows.replaceChildren();
  actionRows.replaceChildren();
  addCondition();
  addAction();
  clearErrors();
  document.getElementById("rule-test-result").replaceChildren();
  document.getElementById("rule-editor-title").textContent = "Create a rule";
  document.getElementById("rule-scope").disabled = false;
  document.getElementById("rule-enabled-row").hidden = false;
  document.getElementById("rule-cancel").hidden = true;
  document.getElementById("rule-save").textContent = "Save rule";
}

function edit(r) {
  reset();
  editing = r;
  form.elements.namedItem("name").value = r.name;
  form.elements.namedItem("match").value = r.match;
  const select = document.getElementById("rule-scope");
  select.value = r.account_id ? `account:${r.account_id}` : `workspace:${r.workspace}`;
  select.disabled = true;
  conditionRows.replaceChildren();
  actionRows.replaceChildren();
  r.conditions.forEach(addCondition);
  r.actions.forEach(addAction);
  document.getElementById("rule-enabled-row").hidden = true;
  document.getElementById("rule-cancel").hidden = false;
  document.getElementById("rule-save").textContent = "Save the change";
  const title = document.getElementById("rule-editor-title");
  title.textContent = `Change the rule ${r.name}`;
  title.focus();
}

async function save() {
  clearErrors();
  const name = form.elements.namedItem("name").value.trim();
  const out = editing
    ? await perform("update_rule", { rule_id: editing.id, name, ...body() }, null, showError)
    : await perform("create_rule", { name, ...scope(), ...body(), enabled: form.elements.namedItem("enabled").checked }, null, showError);
  if (!out) return;
  notice(editing ? `The rule ${out.name} is changed.` : `The rule ${out.name} is saved.`);
  reset();
  refresh();
}

function fillScopes() {
  const select = document.getElementById("rule-scope");
  const workspaces = [...new Set([...accounts.values()].map((a) => a.workspace))];
  if (!workspaces.length) workspaces.push("default");
  select.replaceChildren(
    ...workspaces.map((w) => el("option", { value: `workspace:${w}` }, `Every mailbox of ${w}`)),
    ...[...accounts.values()].map((a) => el("option", { value: `account:${a.id}` }, `Only ${accountName(a.id)}`)),
  );
}

if (form) {
  document.getElementById("rule-add-condition").addEventListener("click", () => addCondition());
  document.getElementById("rule-add-action").addEventListener("click", () => addAction());
  document.getElementById("rule-test").addEventListener("click", test);
  document.getElementById("rule-cancel").addEventListener("click", reset);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const submit = document.getElementById("rule-save");
    submit.disabled = true;
    try {
      await save();
    } finally {
      submit.disabled = false;
    }
  });
  reset();
}

Promise.all([
  call("list_accounts", {}).then((out) => {
    accounts = new Map(out.accounts.map((a) => [a.id, a]));
  }, () => {}),
  call("list_labels", {}).then((out) => {
    labels = out.labels;
    for (const l of labels) labelNames.set(l.id, l.name);
  }, () => {}),
]).finally(() => {
  if (form) fillScopes();
  refresh();
});
