// /mail's snippets: a person's reusable texts, managed in the side's "Snippets" section (list_snippets,
// create_snippet, update_snippet, and delete_snippet through perform(): the gate's proposal is shown and
// confirmed), and offered in the composer's "Insert a snippet" list (mail-compose.js fills one with fill_snippet:
// the placeholders are filled by the server, never here).
import { call, describeError, el, perform } from "../lib.js";

const forms = document.getElementById("snippet-forms");
const picker = document.getElementById("compose-snippet");
const pickerRow = document.getElementById("compose-snippet-row");

let snippets = [];

function snippetForm(s) {
  const key = s ? s.id : "new";
  const name = el("input", { id: `snippet-name-${key}`, type: "text", maxlength: "100", autocomplete: "off" });
  const text = el("textarea", { id: `snippet-text-${key}`, rows: "4", maxlength: "100000", "aria-describedby": "snippet-help" });
  name.value = s ? s.name : "";
  text.value = s ? s.text : "";
  const save = el("button", { type: "submit" }, s ? "Save snippet" : "Add snippet");
  const formEl = el("form", { class: "signature snippet", "data-snippet-id": s ? s.id : null },
    el("label", { for: name.id }, s ? "Name" : "New snippet: name"),
    name,
    el("label", { for: text.id }, "Text"),
    text,
    el("div", { class: "row-actions" },
      save,
      s ? el("button", { type: "button", class: "delete-snippet", onclick: () => remove(s) }, "Delete") : null,
    ),
  );
  formEl.addEventListener("submit", async (event) => {
    event.preventDefault();
    save.disabled = true;
    try {
      const body = s ? { snippet_id: s.id, name: name.value, text: text.value } : { name: name.value, text: text.value };
      const out = await perform(s ? "update_snippet" : "create_snippet", body, `Snippet ${name.value.trim()} saved.`);
      if (out) await load();
    } finally {
      save.disabled = false;
    }
  });
  return formEl;
}

async function remove(s) {
  if (await perform("delete_snippet", { snippet_id: s.id }, `The snippet ${s.name} was deleted.`)) await load();
}

function render() {
  forms.replaceChildren(...snippets.map(snippetForm), snippetForm(null));
  picker.replaceChildren(...snippets.map((s) => el("option", { value: s.id }, s.name)));
  pickerRow.hidden = !snippets.length;
}

export async function load() {
  try {
    snippets = (await call("list_snippets", {})).snippets;
  } catch (err) {
    forms.replaceChildren(el("p", { class: "errors" }, describeError(err)));
    return;
  }
  render();
}
