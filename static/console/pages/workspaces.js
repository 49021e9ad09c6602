// /workspaces: the tenant's workspaces; each row says whether this person may rename it (`renamable`).
import { button, el, load, onSubmit, perform, row, table, when } from "../lib.js";

const rename = async (w, input) => {
  const name = input.value.trim();
  if (!name || name === w.name) return;
  if (await perform("rename_workspace", { workspace_id: w.id, name }, `Workspace ${w.name} is now ${name}.`)) refresh();
};

const renameCell = (w) => {
  if (!w.renamable) return "";
  const input = el("input", { type: "text", value: w.name, maxlength: 100, "aria-label": `New name for ${w.name}` });
  return el("span", {}, input, " ", button("Rename", () => rename(w, input)));
};

const refresh = () =>
  load("list_workspaces", "workspaces-list", (out) =>
    table(
      ["Name", "Mail accounts", "Created", ""],
      out.workspaces.map((w) => row({ "data-workspace-id": w.id }, [w.name, String(w.mail_accounts), when(w.created_at), renameCell(w)])),
    ),
  );

onSubmit("create-workspace", async (form) => {
  const name = new FormData(form).get("name").trim();
  if (await perform("create_workspace", { name }, `Workspace ${name} is created.`)) {
    form.reset();
    refresh();
  }
});

refresh();
