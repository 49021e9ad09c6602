// /connections: the assistants the person connected through the consent screen.
import { auditLink, button, el, list, load, perform, row, table, when } from "../lib.js";
import { fillUndo } from "../undo.js";

const listConnections = () =>
  load("list_connections", "connections-list", (out) =>
    out.connections.length
      ? table(
          ["Assistant", "Returns to", "Permissions", "Workspaces", "Tools", "Lockdown", "Connected", "Ends", "Last used", "Status", ""],
          out.connections.map((c) =>
            row({ "data-connection-id": c.id }, [
              c.client_name || "—",
              c.redirect_host || "—",
              list(c.scopes),
              list(c.workspaces, "every workspace"),
              c.tool_set ? `the set ${c.tool_set}` : "all its permissions allow",
              c.lockdown ? el("span", { class: "status-expired" }, "on") : "off",
              when(c.created_at),
              c.expires_at ? when(c.expires_at) : "when revoked",
              c.last_used_at ? when(c.last_used_at) : "never",
              c.revoked
                ? el("span", { class: "status-revoked", "data-revoked-reason": "" }, c.revoked_reason ? `revoked: ${c.revoked_reason}` : "revoked")
                : "active",
              el("span", { class: "row-actions" },
                auditLink("oauth", c.id, c.client_name || "this assistant"),
                c.revoked ? "" : button(c.lockdown ? "Lift lockdown" : "Lock down", () => lockdown(c), { "data-action": "lockdown" }),
                c.revoked ? "" : button("Revoke", () => revoke(c), { "data-action": "revoke" }),
              ),
            ]),
          ),
        )
      : el("p", { class: "hint" }, "No assistant is connected."),
  );

// the connections that may have acted, for "Undo what this assistant did since …"
const refresh = () =>
  listConnections().then((out) => {
    if (out) fillUndo(out.connections.map((c) => ({ value: `oauth:${c.id}`, text: `connection ${c.client_name || "an assistant"}` })));
  });

// lockdown: once it has read mail from someone nobody here has written to, a person decides its every request
const lockdown = async (c) => {
  const done = c.lockdown ? "The connection is no longer in lockdown." : "The connection is in lockdown.";
  if (await perform("set_connection_lockdown", { connection_id: c.id, lockdown: !c.lockdown }, done)) refresh();
};

const revoke = async (c) => {
  if (await perform("revoke_connection", { connection_id: c.id }, "The connection is revoked.")) refresh();
};

refresh();
