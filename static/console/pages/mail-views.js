// /mail's saved views: listed under the folders with their counts (list_views), opened by mail.js (search with a
// view's words, list_messages for a view without), saved from a search ("Save as view": create_view, with the
// search's own inputs) and deleted (delete_view, through perform(): the gate's proposal is shown and confirmed).
import { call, describeError, el, perform } from "../lib.js";

const box = document.getElementById("mail-views");
const saveForm = document.getElementById("view-save");
const saveName = document.getElementById("view-name");

let opener = null; // mail.js's openView
let views = [];
let current = null; // the id of the view open in the list
let lastSearch = null; // the search shown, as search took it: what "Save as view" saves

const counted = (v) => (v.count === null ? "" : v.count_more ? `${v.count}+` : String(v.count));

function render() {
  if (!views.length) {
    box.replaceChildren(el("p", { class: "hint" }, "No views yet: search, then save the search as a view."));
    return;
  }
  box.replaceChildren(
    el("ul", { class: "views" },
      views.map((v) => {
        const count = counted(v);
        return el("li", { "data-view-id": v.id },
          el("button", {
            type: "button",
            class: "folder",
            "aria-current": v.id === current ? "true" : null,
            title: v.problem ? "It names a mailbox or label you no longer reach." : null,
            onclick: async () => {
              if (await opener(v)) {
                current = v.id;
                render();
              }
            },
          },
          el("span", { dir: "auto" }, v.name),
          count ? el("span", { class: "view-count", "aria-label": `${count} messages` }, count) : null,
          v.problem ? el("span", { class: "hint" }, "out of reach") : null),
          el("button", { type: "button", class: "delete-view", "aria-label": `Delete the view ${v.name}`, onclick: () => remove(v) }, "×"),
        );
      }),
    ),
  );
}

export async function load() {
  try {
    views = (await call("list_views", {})).views;
  } catch (err) {
    box.replaceChildren(el("p", { class: "errors" }, describeError(err)));
    return;
  }
  render();
}

async function remove(v) {
  const out = await perform("delete_view", { view_id: v.id }, `The view ${v.name} was deleted.`);
  if (out) load();
}

// mail.js tells what the list shows: a search (its inputs) or, with null, a folder
export function searched(query) {
  lastSearch = query;
  saveForm.hidden = !query;
  if (current !== null) {
    current = null;
    render();
  }
}

saveForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  if (!lastSearch) return;
  const name = saveName.value.trim();
  if (!name) {
    saveName.focus();
    return;
  }
  const out = await perform("create_view", { ...lastSearch, name }, `Saved as the view ${name}.`);
  if (!out) return;
  saveName.value = "";
  saveForm.hidden = true;
  await load();
});

// mail.js starts it once the accounts are in
export function start(open) {
  opener = open;
  load();
}
