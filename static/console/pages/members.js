// /members: the tenant's members and open invitations. Each member's row says which roles this
// person may give them (`assignable_roles`) and whether they may remove them (`can_remove`).
import { button, el, load, onSubmit, perform, row, table, when } from "../lib.js";

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
      ["Person", "Role", "Joined", ""],
      out.members.map((m) => row({ "data-membership-id": m.membership_id }, [m.you ? `${m.email} (you)` : m.email, roleCell(m), when(m.joined), removeCell(m)])),
    ),
  );
  const box = document.getElementById("invitations-list");
  if (!box || !out || out.invitations === null) return;
  box.replaceChildren(
    out.invitations.length
      ? table(
          ["Address", "Role", "Invited by", "Expires", ""],
          out.invitations.map((i) =>
            row({ "data-invitation-id": i.id }, [
              i.email,
              i.role,
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
  if (await perform("invite_member", { email, role: data.get("role") }, `An invitation is on its way to ${email}.`)) {
    form.reset();
    refresh();
  }
});

refresh();
