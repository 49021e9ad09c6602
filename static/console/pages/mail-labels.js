// /mail's labels: each label's description, in the side's "Labels" section. A description makes the label an AI
// label: new mail that matches it is labelled, as the person who set it. Saving goes through perform()
// (set_label_description is always confirmed: the gate's proposal says how many messages of the last 30 days it
// would have labelled, with up to three subjects). Each label says whether it labels, or why it stopped; an open
// message says why an AI label is on it (explain_labels). Nothing here decides anything: the server does.
import { call, describeError, el, perform } from "../lib.js";

const forms = document.getElementById("label-forms");

let labels = [];
let accounts = {}; // account id -> name

function stateText(l) {
  if (l.ai_state === "on") return "Labels new mail that matches its description.";
  if (l.ai_state === "stopped") return `Stopped: ${l.ai_stopped}. Save the description again to start it.`;
  return "No description: it labels only what you label by hand.";
}

function labelForm(l) {
  const text = el("textarea", { id: `label-description-${l.id}`, rows: "3", maxlength: "500", "aria-describedby": `label-state-${l.id} label-help` });
  text.value = l.description;
  const save = el("button", { type: "submit" }, "Save description");
  const where = Object.keys(accounts).length > 1 && accounts[l.account_id] ? ` (${accounts[l.account_id]})` : "";
  const formEl = el("form", { class: "signature label-description", "data-label-id": l.id },
    el("label", { for: text.id }, el("bdi", {}, l.name), `${where}: description`),
    text,
    el("p", { id: `label-state-${l.id}`, class: `hint ai-state ai-${l.ai_state}` }, stateText(l)),
    el("div", { class: "row-actions" }, save),
  );
  formEl.addEventListener("submit", async (event) => {
    event.preventDefault();
    save.disabled = true;
    try {
      const body = { label_id: l.id, description: text.value };
      const out = await perform("set_label_description", body, `The description of ${l.name} was saved.`);
      if (out) await load();
    } finally {
      save.disabled = false;
    }
  });
  return formEl;
}

function render() {
  if (!labels.length) {
    forms.replaceChildren(el("p", { class: "hint" }, "No labels yet."));
    return;
  }
  forms.replaceChildren(...labels.map(labelForm));
}

export async function load() {
  try {
    labels = (await call("list_labels", {})).labels;
  } catch (err) {
    forms.replaceChildren(el("p", { class: "errors" }, describeError(err)));
    return;
  }
  render();
}

// mail.js starts it once the accounts are in, with the labels it has (the first screen's: no call of its own)
export function start(accountList, labelList) {
  accounts = Object.fromEntries(accountList.map((a) => [a.id, a.name]));
  labels = labelList;
  render();
}

// Why the AI labels on an open message are there: filled in when explain_labels answers (nothing when none is).
export function why(messageId, labelIds) {
  const box = el("div", { class: "ai-why", hidden: true });
  const ai = (labelIds || []).filter((id) => labels.some((l) => l.id === id && l.ai_state !== "off"));
  if (!ai.length) return box;
  call("explain_labels", { message_id: messageId }).then((out) => {
    const shown = out.decisions.filter((d) => d.on && d.labelled);
    if (!shown.length) return;
    box.replaceChildren(
      el("h4", {}, "Why these labels"),
      el("ul", {},
        shown.map((d) => el("li", {},
          el("bdi", { class: "label-chip" }, d.label_name),
          ` ${d.method === "model" ? "by the chat model" : "by meaning"}: ${d.reason}.`,
          d.examples.length ? el("span", { class: "hint" }, " Like: ", d.examples.map((e) => el("bdi", {}, e.subject)).flatMap((b, i) => (i ? ["; ", b] : [b]))) : null,
        )),
      ),
    );
    box.hidden = false;
  }, (err) => {
    box.replaceChildren(el("p", { class: "errors" }, describeError(err)));
    box.hidden = false;
  });
  return box;
}
