// /automations: the automatic replies of the mailboxes this person reaches (list_automations), each with its state
// (on, waiting for approval, rejected, cancelled, and why it stopped), exactly what it sends (subject and text, as
// text), to whom, how often, when, how many replies it sent and how many wait for the sending budgets (and why);
// what it did (get_automation's history); approving one an assistant asked for, exactly as shown
// (approve_automation with its content_hash), rejecting it with a reason (reject_automation), cancelling one
// (cancel_auto_reply); setting a new one (set_auto_reply, through the gate's proposal). ?automation=<id> (the
// approval link an assistant hands on) picks that one out. Below, the unsubscribe requests among the person's
// latest outbound requests (list_outbound), each followed on /outbound. The page decides nothing of its own.
import { askFirst, button, call, el, notice, perform, plainError, showHistory, when } from "../lib.js";
import { conditionWords, labelNames } from "./mail-rules.js";
import { provenanceSection } from "./provenance.js";

const listBox = document.getElementById("automations-list");
const namedBox = document.getElementById("automation-named");
const historySection = document.getElementById("automation-history");
const historyTitle = document.getElementById("automation-history-title");
const historyBody = document.getElementById("automation-history-body");
const form = document.getElementById("auto-reply-form");
const unsubscribeBox = document.getElementById("unsubscribe-list");

const named = new URLSearchParams(window.location.search).get("automation");
const localZone = () => Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";

let accounts = new Map(); // id -> account (list_accounts)

const accountName = (id) => {
  const a = accounts.get(id);
  return a ? (a.email_address ? `${a.name} (${a.email_address})` : a.name) : "a mailbox";
};

// ------------------------------------------------------------ an automatic reply in words

const STATES = {
  active: "On",
  awaiting_approval: "Waiting for your approval",
  rejected: "Rejected",
  cancelled: "Cancelled",
};
const STOPPED = {
  approver_left: "Stopped: the person who approved it left this tenant.",
  approver_lost_mailbox: "Stopped: the person who approved it no longer reaches this mailbox.",
};
const WAITING_WHY = {
  budget_spent: "the hourly budget is spent",
  budget_unavailable: "budgets cannot be checked right now",
};
// why it answered a message, or did not (get_automation's history)
const OUTCOMES = {
  replied: "replied",
  replied_recently: "not answered: this sender already had a reply within the window",
  mailing_list: "not answered: a mailing list",
  bulk: "not answered: bulk mail",
  automatic: "not answered: automatic mail",
  robot: "not answered: a robot's address",
  own_address: "not answered: one of your own mailboxes",
  not_addressed: "not answered: not addressed to the mailbox (a Bcc copy)",
  not_known: "not answered: not someone the mailbox has written to",
  no_sender: "not answered: no sender's address",
};
const REPLY_STATES = {
  awaiting_approval: "waiting for approval", approved: "approved", queued: "queued", sending: "sending",
  sent: "sent", failed: "failed", rejected: "rejected", cancelled: "cancelled", unknown: "outcome unknown",
};
const outcomeWords = (code) => OUTCOMES[code] || `not answered (${code})`;

const audienceWords = (a) => (a.audience === "known" ? "Only people the mailbox has written to" : "Everyone who writes to the mailbox");
const scheduleWords = (a) =>
  `${a.starts_at ? `From ${when(a.starts_at)}` : "From when it was turned on"}` +
  `${a.ends_at ? ` until ${when(a.ends_at)}` : ", until it is cancelled"}` +
  (a.starts_at || a.ends_at ? ` (set in ${a.tz})` : "");

function stateWords(a) {
  if (a.state === "cancelled" && STOPPED[a.stopped_reason]) return STOPPED[a.stopped_reason];
  return STATES[a.state] || a.state;
}

function sentWords(a) {
  const sent = `${a.replied} ${a.replied === 1 ? "reply" : "replies"} sent or on the way`;
  if (!a.waiting) return sent;
  const why = (a.waiting_why || []).map((w) => WAITING_WHY[w] || w).join("; ") || "the sending budgets";
  return `${sent}; ${a.waiting} ${a.waiting === 1 ? "waits" : "wait"} for the sending budgets (${why}), and ${a.waiting === 1 ? "goes" : "go"} once they allow`;
}

// a forwarding rule's terms, exactly as approved (its conditions, in words)
const ruleTerms = (a) =>
  el("div", {},
    el("span", {}, `What its rule matches (${a.match === "any" ? "any" : "all"} of), but mail Oaken forwarded already:`),
    el("ul", { class: "rule-terms" }, a.conditions.map((c) => el("li", {}, conditionWords(c)))),
  );

function article(a) {
  const name = accountName(a.account_id);
  const waiting = a.state === "awaiting_approval";
  const live = waiting || a.state === "active";
  const forward = a.kind === "forward";
  const what = forward ? (a.rule_id ? "Forwarding rule" : "Forwarding") : "Automatic reply";
  const rows = forward
    ? [
        ["State", el("span", { class: `state state-${a.state}` }, stateWords(a))],
        ["Mailbox", name],
        ["Forwards to", el("bdi", {}, a.forward_to)],
        ["What", a.rule_id ? ruleTerms(a) : "Every new message, but spam, trash and mail Oaken forwarded already"],
        ["Forwards", sentWords(a).replace(/repl(y|ies)/, (m) => (m === "reply" ? "forward" : "forwards"))],
      ]
    : [
        ["State", el("span", { class: `state state-${a.state}` }, stateWords(a))],
        ["Mailbox", name],
        ["Subject", a.subject ? el("bdi", {}, a.subject) : el("span", { class: "hint" }, "“Re:” and the message's own subject")],
        ["Sent to", audienceWords(a)],
        ["How often", `At most once per sender in ${a.once_per_days} ${a.once_per_days === 1 ? "day" : "days"}`],
        ["When", scheduleWords(a)],
        ["Replies", sentWords(a)],
      ];
  if (a.approved_by) rows.push(["Approved by", a.approved_by]);
  if (a.reject_reason) rows.push(["Reason", el("bdi", {}, a.reject_reason)]);
  const title = `${name}: ${stateWords(a)}`;
  return el("article", { class: "outbound automation", tabindex: "-1", "data-automation-id": a.automation_id, "data-state": a.state, "aria-label": title },
    el("h3", {}, `${what} of ${name}`),
    provenanceSection(a.provenance),
    waiting ? el("p", { class: "hint" }, "An assistant asked for it. It sends nothing until you approve it; what you approve is exactly what is shown.") : null,
    el("dl", { class: "headers" }, rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
    forward ? null : el("h4", {}, "Text"),
    forward ? null : el("pre", { class: "message-text", dir: "auto" }, a.text),
    el("details", { class: "technical" }, el("summary", {}, "Technical details"),
      el("dl", {}, el("dt", {}, "Content hash"), el("dd", {}, el("code", {}, a.content_hash)))),
    el("div", { class: "row-actions" },
      waiting ? button("Approve", () => approveIt(a), { "data-action": "approve", "aria-label": `Approve the ${what.toLowerCase()} of ${name}` }) : null,
      waiting ? button("Reject", () => rejectIt(a), { "data-action": "reject", "aria-label": `Reject the ${what.toLowerCase()} of ${name}` }) : null,
      live ? button("Cancel it", () => cancelIt(a), { "data-action": "cancel", "aria-label": `Cancel it: the ${what.toLowerCase()} of ${name}` }) : null,
      button("What it did", () => showAutomationHistory(a), { "data-action": "history", "aria-label": `What it did: the ${what.toLowerCase()} of ${name}` }),
    ),
  );
}

// ------------------------------------------------------------ the list

async function refresh() {
  let out;
  try {
    out = await call("list_automations", {});
  } catch (err) {
    listBox.replaceChildren(el("p", { class: "errors" }, plainError(err)));
    return [];
  }
  if (!out.automations.length) {
    listBox.replaceChildren(el("p", { class: "hint" }, "No automatic reply yet."));
  } else {
    listBox.replaceChildren(...out.automations.map(article));
  }
  return out.automations;
}

let picked = false;
async function pickOut(shown) {
  if (!named || picked) return;
  picked = true;
  const found = shown.find((a) => a.automation_id === named);
  const node = found ? listBox.querySelector(`article[data-automation-id="${CSS.escape(named)}"]`) : null;
  if (node) {
    node.classList.add("selected");
    node.setAttribute("aria-current", "true");
    namedBox.replaceChildren(el("p", { class: "hint" }, found.state === "awaiting_approval"
      ? "The automatic reply your assistant sent you here for is marked below: read it, then approve or reject it."
      : `The automatic reply this link names is marked below: ${stateWords(found).toLowerCase()}.`));
    node.scrollIntoView({ block: "center" });
    node.focus();
    return;
  }
  try {
    const a = await call("get_automation", { automation_id: named, history: 0 });
    namedBox.replaceChildren(el("p", { class: "hint" }, `The automatic reply this link names: ${stateWords(a)}. ${a.next}`));
  } catch (err) {
    namedBox.replaceChildren(el("p", { class: "errors" }, plainError(err, { automation_id: "The automatic reply" })));
  }
}

// ------------------------------------------------------------ deciding and cancelling

async function approveIt(a) {
  const asked = await askFirst("Turn on this automatic reply?",
    `It answers new mail to ${accountName(a.account_id)} by itself, on your authority, with exactly the subject and text shown.`,
    "Approve");
  if (!asked) return notice("Nothing was changed.");
  // approve exactly what is shown: the operation refuses if it differs
  if (await perform("approve_automation", { automation_id: a.automation_id, content_hash: a.content_hash }, "Approved: the automatic reply is on.")) {
    await refresh();
  }
}

async function rejectIt(a) {
  const asked = await askFirst("Reject this automatic reply?",
    `The automatic reply of ${accountName(a.account_id)} will never send anything. The assistant that asked is told, with your reason if you give one.`,
    "Reject", { label: "Reason (optional; the assistant reads it)", maxlength: 1000 });
  if (!asked) return notice("Nothing was changed.");
  const body = { automation_id: a.automation_id };
  if (asked.text.trim()) body.reason = asked.text.trim();
  if (await perform("reject_automation", body, "Rejected: it sends nothing.")) await refresh();
}

async function cancelIt(a) {
  const what = a.kind !== "forward" ? "automatic reply" : a.rule_id ? "forwarding rule's forward" : "forwarding";
  const asked = await askFirst(`Cancel this ${what}?`,
    `The ${what} of ${accountName(a.account_id)} sends nothing more: what it made that has not begun sending is withdrawn.`,
    "Cancel it");
  if (!asked) return notice("Nothing was changed.");
  if (await perform("cancel_auto_reply", { automation_id: a.automation_id }, "Cancelled: it sends nothing more.")) await refresh();
}

// ------------------------------------------------------------ what it did (get_automation's history)

function showAutomationHistory(a) {
  const what = a.kind === "forward" ? "forwarding" : "automatic reply";
  return showHistory({
    section: historySection, title: historyTitle, body: historyBody,
    heading: `What the ${what} of ${accountName(a.account_id)} did`,
    op: "get_automation", input: { automation_id: a.automation_id },
    none: "It has not decided on any message yet.",
    item: (h) =>
      el("li", { "data-outcome": h.outcome },
        el("bdi", {}, h.sender || "(no sender)"),
        el("span", { class: "hint" }, ` ${when(h.at)}${h.message_id ? "" : " (a message since deleted)"}`),
        el("div", {}, outcomeWords(h.outcome),
          h.request_state ? `; the reply: ${REPLY_STATES[h.request_state] || h.request_state}` : ""),
      ),
  });
}

const closeHistory = document.getElementById("automation-history-close");
if (closeHistory) closeHistory.addEventListener("click", () => { historySection.hidden = true; });

// ------------------------------------------------------------ setting one: set_auto_reply, confirmed

const LABELS = {
  account_id: "The mailbox", subject: "The subject", text: "The text", audience: "Who gets it",
  once_per_days: "Days between replies to one sender", starts_at: "From", ends_at: "Until", tz: "The time zone",
};

function clearErrors(within = form) {
  for (const slot of within.querySelectorAll(".errors")) {
    slot.textContent = "";
    slot.hidden = true;
  }
}

const showError = (error) => showErrorIn(form, error);

function showErrorIn(form, error) {
  const f = error.field || "";
  const slot = form.querySelector(`[data-error-for="${CSS.escape(f)}"]`) || form.querySelector('[data-error-for=""]');
  slot.textContent = plainError(error, LABELS);
  slot.hidden = false;
  const input = f ? form.querySelector(`[name="${CSS.escape(f)}"]`) : null;
  if (input) input.focus();
}

async function save() {
  clearErrors();
  const value = (name) => form.elements.namedItem(name).value;
  const body = {
    account_id: value("account_id"),
    subject: value("subject").trim(),
    text: value("text"),
    audience: form.querySelector('input[name="audience"]:checked').value,
    tz: localZone(),
  };
  if (value("once_per_days") !== "") body.once_per_days = Number(value("once_per_days"));
  if (value("starts_at")) body.starts_at = value("starts_at");
  if (value("ends_at")) body.ends_at = value("ends_at");
  const out = await perform("set_auto_reply", body, null, showError);
  if (!out) return;
  notice(out.state === "active" ? `The automatic reply of ${accountName(out.account_id)} is on.` : out.next);
  form.reset();
  await refresh();
}

function fillAccounts() {
  const select = document.getElementById("auto-reply-account");
  // only a mailbox connected over IMAP/SMTP can send (the operation says so of any other)
  const sending = [...accounts.values()].filter((a) => a.kind === "imap" && a.email_address);
  select.replaceChildren(...sending.map((a) => el("option", { value: a.id }, accountName(a.id))));
  const forwarding = document.getElementById("forward-account");
  if (forwarding) forwarding.replaceChildren(...sending.map((a) => el("option", { value: a.id }, accountName(a.id))));
  if (!sending.length) {
    select.disabled = true;
    document.getElementById("auto-reply-save").disabled = true;
    document.getElementById("auto-reply-account-hint").textContent = "None of your mailboxes is connected over IMAP/SMTP, so none can send an automatic reply.";
  }
}

if (form) {
  document.getElementById("auto-reply-zone").textContent = localZone();
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const submit = document.getElementById("auto-reply-save");
    submit.disabled = true;
    try {
      await save();
    } finally {
      submit.disabled = false;
    }
  });
}

// ------------------------------------------------------------ forwarding a mailbox: set_forwarding, confirmed

const forwardForm = document.getElementById("forward-form");
if (forwardForm) {
  forwardForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const submit = document.getElementById("forward-save");
    submit.disabled = true;
    try {
      clearErrors(forwardForm);
      const value = (name) => forwardForm.elements.namedItem(name).value;
      const body = { account_id: value("account_id"), to: value("to").trim() };
      const out = await perform("set_forwarding", body, null, (error) => showErrorIn(forwardForm, error));
      if (!out) return;
      notice(out.state === "active" ? `New mail of ${accountName(out.account_id)} is forwarded to ${out.forward_to}.` : out.next);
      forwardForm.reset();
      await refresh();
    } finally {
      submit.disabled = false;
    }
  });
}

// ------------------------------------------------------------ unsubscribe requests (list_outbound)

const UNSUBSCRIBE_KINDS = { unsubscribe_post: "One-click unsubscribe", unsubscribe_mail: "Unsubscribe by e-mail" };
const OUTBOUND_STATES = REPLY_STATES;

async function loadUnsubscribes() {
  let out;
  try {
    out = await call("list_outbound", { limit: 100 });
  } catch (err) {
    unsubscribeBox.replaceChildren(el("p", { class: "errors" }, plainError(err)));
    return;
  }
  const mine = out.requests.filter((r) => UNSUBSCRIBE_KINDS[r.request.kind]);
  if (!mine.length) {
    unsubscribeBox.replaceChildren(el("p", { class: "hint" }, "No unsubscribe request among your latest outbound requests."));
    return;
  }
  unsubscribeBox.replaceChildren(
    el("ul", { class: "rule-log unsubscribes" },
      mine.map((r) => {
        const id = r.request.request_id;
        const to = r.request.kind === "unsubscribe_post" ? `the list at ${r.request.target}` : r.to.join(", ");
        return el("li", { "data-request-id": id, "data-state": r.request.state },
          el("strong", {}, UNSUBSCRIBE_KINDS[r.request.kind]), ` to ${to}`,
          el("div", {}, `${OUTBOUND_STATES[r.request.state] || r.request.state}, asked ${when(r.request.created_at)}`,
            r.request.http_status ? `; the list answered HTTP ${r.request.http_status}` : ""),
          el("a", { href: `/outbound?request=${encodeURIComponent(id)}`, "aria-label": `On Outbound: ${UNSUBSCRIBE_KINDS[r.request.kind]} to ${to}` }, "On Outbound"),
        );
      }),
    ),
  );
}

// ------------------------------------------------------------ start

Promise.all([
  call("list_accounts", {}).then((out) => {
    accounts = new Map(out.accounts.map((a) => [a.id, a]));
  }, () => {}),
  call("list_labels", {}).then((out) => {
    for (const l of out.labels) labelNames.set(l.id, l.name);
  }, () => {}),
]).finally(async () => {
  if (form) fillAccounts();
  const shown = await refresh();
  await pickOut(shown);
  loadUnsubscribes();
});
