// /mail: why rules acted on a message (get_message's applied_rules): each rule's name, the conditions that held and
// each action with its outcome, in the rule's own terms, as the engine recorded them. Text only.
import { el } from "../lib.js";

// an action's outcome, as the engine recorded it: ok, skipped, or the gate's refusal code (also the Rules page's)
const OUTCOMES = {
  ok: "done",
  skipped: "nothing to do",
  NOT_FOUND: "refused: the folder or label it names was not found",
  FORBIDDEN: "refused: its owner may not do that",
  OUT_OF_SCOPE: "refused: its owner does not reach that mailbox",
  INVALID_INPUT: "refused as not valid",
  CONFLICT: "refused: it could not be done then",
  LIMIT_EXCEEDED: "refused: over a limit",
  awaiting_approval: "not sent: the forward waits for a person's approval on the Automations page",
  approver_gone: "not sent: the person who approved the forward can no longer send from this mailbox",
  INSUFFICIENT_SCOPE: "refused: it needs the send permission",
};
export const outcomeWords = (code) => OUTCOMES[code] || `refused (${code})`;

// ------------------------------------------------------------ a rule in words (its own terms, as stored; the Rules and
// Automations pages)

// label id -> name (list_labels), for the label conditions: filled by the page that shows them
export const labelNames = new Map();

const ADDRESS_OPS = { is: "is", domain: "is in the domain", contains: "contains" };
export const HEADERS = {
  "list-id": "List-Id",
  "list-unsubscribe": "List-Unsubscribe",
  "auto-submitted": "Auto-Submitted",
  precedence: "Precedence",
  "x-mailer": "X-Mailer",
};
const FIELD_WORDS = { subject: "the subject", body: "the text", list_id: "the List-Id" };

export function conditionWords(c) {
  switch (c.field) {
    case "from":
      return `the sender ${ADDRESS_OPS[c.op] || c.op} “${c.value}”`;
    case "to":
      return `a recipient ${ADDRESS_OPS[c.op] || c.op} “${c.value}”`;
    case "subject":
    case "body":
    case "list_id":
      return `${FIELD_WORDS[c.field]} ${c.op === "is" ? "is" : "contains"} “${c.value}”`;
    case "header":
      return c.op === "present"
        ? `it has a ${HEADERS[c.name] || c.name} header`
        : `its ${HEADERS[c.name] || c.name} header ${c.op === "is" ? "is" : "contains"} “${c.value}”`;
    case "attachment":
      return c.type === "*" ? "it has an attachment" : `it has an attachment of type “${c.type}”`;
    case "folder":
      return `it is in the folder “${c.value}”`;
    case "age":
      return `it is ${c.op === "older_than" ? "older" : "newer"} than ${c.days} days`;
    case "about":
      return `it is about “${c.text}” (a likeness of at least ${Number(c.threshold).toFixed(2)})`;
    case "label":
      return `it carries the label “${labelNames.get(c.label_id) || "a label since deleted"}”`;
    default:
      return String(c.field);
  }
}

export function actionWords(a) {
  switch (a.action) {
    case "add_label":
      return `add the label “${a.label}”`;
    case "remove_label":
      return `remove the label “${a.label}”`;
    case "move":
      return `move it to “${a.folder}”`;
    case "mark_read":
      return "mark it read";
    case "pin":
      return "pin it";
    case "skip_inbox":
      return "skip the inbox (to the archive)";
    case "snooze":
      return `snooze it for ${a.days} days`;
    case "stop":
      return "stop: no later rule acts on it";
    case "forward":
      return `forward it to “${a.to}”, by itself, as a person approved`;
    default:
      return String(a.action);
  }
}

export function appliedRules(m) {
  const applied = m.applied_rules || [];
  if (!applied.length) return null;
  return el("section", { class: "applied-rules", "aria-label": "Rules applied" },
    el("h4", {}, "Rules applied ", el("span", { class: "hint" }, "(why this message is here)")),
    el("ul", {},
      applied.map((a) =>
        el("li", { "data-rule-id": a.rule_id || "" },
          el("strong", {}, a.rule),
          a.rule_id ? null : el("span", { class: "hint" }, " (deleted since)"),
          el("div", {}, "Because ", a.matched.join("; ") || "—"),
          el("div", {}, "It did: ", a.actions.map((x) => `${x.action} (${outcomeWords(x.outcome)})`).join(", ") || "nothing"),
        ),
      ),
    ),
    el("p", { class: "hint" }, el("a", { href: "/rules" }, "Your rules")),
  );
}
