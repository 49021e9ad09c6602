// /policies: the send policies this person sees (their own, or the tenant's for an administrator), one to create, and deleting one
// (list_send_policies, create_send_policy, delete_send_policy; list_accounts names the accounts). A refusal
// is said next to the field it names, in plain words (plainError).
import { button, call, el, formLabels, load, notice, onSubmit, perform, plainError, row, table, when } from "../lib.js";

let accounts = new Map();
const accountName = (id) => (id ? (accounts.get(id) || "a removed account") : "any account");
const items = (text) => text.split(/[\n,]/).map((s) => s.trim()).filter(Boolean);

const remove = async (p) => {
  if (await perform("delete_send_policy", { policy_id: p.id }, `The send policy ${p.name} is deleted: requests it would have approved wait for you again.`)) refresh();
};

const refresh = () =>
  load("list_send_policies", "policies-list", (out) =>
    out.policies.length
      ? table(
          ["Name", "Account", "Addresses", "Domains", "Recipients an hour", "Made by", ""],
          out.policies.map((p) =>
            row({ "data-policy-id": p.id }, [
              p.name,
              accountName(p.account_id),
              p.allowed_addresses.join(", ") || "—",
              p.allowed_domains.join(", ") || "—",
              String(p.recipients_per_hour),
              `${p.created_by}, ${when(p.created_at)}`,
              button("Delete", () => remove(p), { "data-action": "delete", "aria-label": `Delete ${p.name}` }),
            ]),
          ),
        )
      : el("p", { class: "hint" }, "No send policy yet: every request waits for a person's approval."),
  );

const form = document.getElementById("create-policy");
if (form) {
  const slots = [...form.querySelectorAll("[data-error-for]")];
  const clearErrors = () => slots.forEach((slot) => { slot.textContent = ""; slot.hidden = true; });
  const showError = (error) => {
    // a field of a list (allowed_domains.2) is said at its list
    const field = (error.field || "").replace(/\.\d+$/, "");
    const slot = slots.find((s) => s.dataset.errorFor === field);
    if (!slot) return;
    slot.textContent = plainError({ ...error, field }, formLabels(form));
    slot.hidden = false;
    const input = form.elements.namedItem(field);
    if (input && input.focus) input.focus();
  };
  onSubmit("create-policy", async () => {
    clearErrors();
    const value = (name) => (form.elements.namedItem(name).value || "").trim();
    const body = {
      name: value("name"),
      allowed_addresses: items(value("allowed_addresses")),
      allowed_domains: items(value("allowed_domains")),
      recipients_per_hour: value("recipients_per_hour") === "" ? null : Number(value("recipients_per_hour")),
    };
    if (value("account_id")) body.account_id = value("account_id");
    const out = await perform("create_send_policy", body, null, showError);
    if (!out) return;
    form.reset();
    notice(`The send policy ${out.name} is created.`);
    refresh();
  });
}

call("list_accounts", {}).then(
  (out) => {
    accounts = new Map(out.accounts.map((a) => [a.id, a.email_address ? `${a.name} (${a.email_address})` : a.name]));
    const select = document.getElementById("policy-account");
    if (select) {
      select.append(...out.accounts.filter((a) => a.email_address).map((a) => el("option", { value: a.id }, accounts.get(a.id))));
    }
  },
  () => {},
).finally(refresh);
