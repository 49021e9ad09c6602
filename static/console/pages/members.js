// /members: the tenant's members and open invitations. Each member's row says which roles this
// person may give them (`assignable_roles`) and whether they may remove them (`can_remove`), and which
// workspaces they reach (`reaches`) and whether this person may choose them (`can_choose_workspaces`).
import { button, call, el, list, load, notice, onSubmit, perform, row, table, when } from "../lib.js";

let workspaces = []; // the workspaces this person reaches (list_workspaces), offered as choices

// checkboxes of the tenant's workspaces, named `name`, those of `ticked` (ids) ticked
const choices = (name, ticked, label) =>
  workspaces.map((w) => el("label", { class: "check" }, el("input", { type: "checkbox", name, value: w.id, checked: ticked.includes(w.id), "aria-label": label ? `${label}: ${w.name}` : null }), ` ${w.name}`));

// what the form says: null for every workspace, else the ids ticked (undefined: nothing chosen at all)
const chosen = (form, name) => {
  if (form.querySelector('input[name="every"]').checked) return null;
  const ids = [...form.querySelectorAll(`input[name="${name}"]:checked`)].map((box) => box.value);
  return ids.length ? ids : undefined;
};

const REACHES = { every: () => "Every workspace", hidden: () => "", given: (m) => list(m.workspaces, "No workspace") };

const reachCell = (m) => {
  const said = REACHES[m.reaches](m);
  if (!workspaces.length || !m.can_choose_workspaces) return said;
  const form = el(
    "form",
    { class: "member-workspaces" },
    el("label", { class: "check" }, el("input", { type: "checkbox", name: "every", checked: m.reaches === "every", "aria-label": `${m.email}: every workspace` }), " Every workspace"),
    choices("given", m.workspace_ids, m.email),
    el("button", { type: "submit" }, "Save"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const ids = chosen(form, "given");
    const body = { membership_id: m.membership_id, workspace_ids: ids === undefined ? [] : ids };
    if (await perform("set_member_workspaces", body, `${m.email}'s workspaces are changed.`)) refresh();
  });
  return el("details", {}, el("summary", {}, said), form);
};

const roleCell = (m) => {
  if (!m.assignable_roles.length) return m.role;
  const select = el("select", { "aria-label": `Role of ${m.email}` }, m.assignable_roles.map((r) => el("option", { value: r, selected: r === m.role }, r)));
  const change = async () => {
    if (select.value === m.role) return;
    const out = await perform("change_member_role", { membership_id: m.membership_id, role: select.value }, `${m.email} is now ${select.value}.`);
    if (out && m.you) window.location.reload();
    else if (out) refresh();
    else select.value = m.role;
  };
  return el("span", {}, select, " ", button("Change", change));
};

const removeCell = (m) => {
  if (!m.can_remove) return "";
  const remove = async () => {
    const out = await perform("remove_member", { membership_id: m.membership_id }, `${m.email} is removed.`);
    if (out && m.you) window.location.assign("/");
    else if (out) refresh();
  };
  return button(m.you ? "Leave" : "Remove", remove, { "data-action": "remove" });
};

const cancel = async (i) => {
  if (await perform("cancel_invitation", { invitation_id: i.id }, `The invitation to ${i.email} is cancelled.`)) refresh();
};

const refresh = async () => {
  const out = await load("list_members", "members-list", (out) =>
    table(
      ["Person", "Role", "Workspaces", "Joined", ""],
      out.members.map((m) => row({ "data-membership-id": m.membership_id }, [m.you ? `${m.email} (you)` : m.email, roleCell(m), reachCell(m), when(m.joined), removeCell(m)])),
    ),
  );
  const box = document.getElementById("invitations-list");
  if (!box || !out || out.invitations === null) return;
  box.replaceChildren(
    out.invitations.length
      ? table(
          ["Address", "Role", "Workspaces", "Invited by", "Expires", ""],
          out.invitations.map((i) =>
            row({ "data-invitation-id": i.id }, [
              i.email,
              i.role,
              i.workspaces === null ? "Every workspace" : list(i.workspaces, "No workspace"),
              i.invited_by || "—",
              i.expired ? el("span", { class: "status-expired" }, `expired ${when(i.expires_at)}`) : when(i.expires_at),
              button("Cancel", () => cancel(i)),
            ]),
          ),
        )
      : el("p", { class: "hint" }, "No open invitations."),
  );
};

onSubmit("invite-member", async (form) => {
  const data = new FormData(form);
  const email = data.get("email").trim();
  const body = { email, role: data.get("role") };
  if (asksWorkspaces()) {
    const ids = chosen(form, "workspace_ids");
    if (ids === undefined) return notice("Pick the workspaces whose mailboxes they will use, or every workspace.", true);
    body.workspace_ids = ids;
  }
  if (await perform("invite_member", body, `An invitation is on its way to ${email}.`)) {
    form.reset();
    refresh();
  }
});

// the workspace choice matters only for the roles the page marks so (a Member's)
const role = document.getElementById("invite-role");
const fieldset = document.getElementById("invite-workspaces");
const asksWorkspaces = () => Boolean(role && role.selectedOptions[0] && role.selectedOptions[0].hasAttribute("data-given-workspaces"));
if (role && fieldset) role.addEventListener("change", () => (fieldset.hidden = !asksWorkspaces()));

const start = async () => {
  if (document.getElementById("invite-member")) {
    try {
      workspaces = (await call("list_workspaces", {})).workspaces;
    } catch {
      workspaces = [];
    }
    const box = document.getElementById("invite-workspace-choices");
    if (box) box.replaceChildren(...choices("workspace_ids", []));
  }
  refresh();
};

start();
