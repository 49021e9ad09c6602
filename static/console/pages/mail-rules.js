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
};
export const outcomeWords = (code) => OUTCOMES[code] || `refused (${code})`;

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
