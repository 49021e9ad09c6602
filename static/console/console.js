// The console's one script. Every action calls an operation over the REST door
// (POST /api/v1/ops/<name>, JSON, X-CSRFToken), exactly as the API documents it. A change that
// needs confirmation answers CONFIRMATION_REQUIRED with a proposal: the person sees it and, if they
// confirm, the same call is sent again with ?confirm=true. Text from the server is only ever set as
// text (never as HTML): names and client names can be chosen by anyone.
"use strict";

(() => {
  const csrfToken = () => {
    const meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : "";
  };

  class OperationError extends Error {
    constructor(error) {
      super(error.message);
      this.error = error;
    }
  }

  async function call(op, body, confirm) {
    const url = `/api/v1/ops/${encodeURIComponent(op)}${confirm ? "?confirm=true" : ""}`;
    let response;
    try {
      response = await fetch(url, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken() },
        body: JSON.stringify(body || {}),
      });
    } catch (_) {
      throw new OperationError({ code: "SERVICE_UNAVAILABLE", message: "The server could not be reached." });
    }
    let data = null;
    try {
      data = await response.json();
    } catch (_) {
      data = null;
    }
    if (!response.ok) {
      const error = data && data.error ? data.error : { code: "INTERNAL_ERROR", message: `The server answered ${response.status}.` };
      throw new OperationError(error);
    }
    return data;
  }

  // ------------------------------------------------------------ building the page (text only)

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "onclick") node.addEventListener("click", value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child !== null && child !== undefined) node.append(child); // strings become text nodes
    }
    return node;
  }

  const when = (iso) => (iso ? new Date(iso).toLocaleString() : "—");
  const list = (items, empty) => (items && items.length ? items.join(", ") : empty);

  function table(headers, rows) {
    return el("table", {}, el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col" }, h)))), el("tbody", {}, rows));
  }

  function row(attrs, cells) {
    return el("tr", attrs, cells.map((c) => el("td", {}, c)));
  }

  function button(label, onClick, attrs) {
    return el("button", { type: "button", onclick: onClick, ...(attrs || {}) }, label);
  }

  // ------------------------------------------------------------ notices and confirmation

  function notice(text, isError) {
    const box = document.getElementById("notice");
    if (!box) return;
    box.textContent = text || "";
    box.className = isError ? "errors" : "";
    box.hidden = !text;
  }

  function describeError(err) {
    if (err instanceof OperationError) {
      return err.error.message || err.error.code;
    }
    return "Something went wrong in this page.";
  }

  function describeValue(value) {
    if (value === null || value === undefined) return "—";
    if (Array.isArray(value)) return value.map(describeValue).join(", ");
    if (typeof value === "object") {
      return Object.entries(value).map(([k, v]) => `${k}: ${describeValue(v)}`).join("; ");
    }
    return String(value);
  }

  function ask(proposal) {
    const dialog = document.getElementById("confirm-dialog");
    dialog.querySelector("[data-summary]").textContent = proposal.summary || "";
    const changes = (proposal.changes || []).map((c) =>
      el("li", {}, el("code", {}, c.id), ": ", describeValue(c.before), " → ", describeValue(c.after)),
    );
    dialog.querySelector("[data-changes]").replaceChildren(...changes);
    dialog.returnValue = "";
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => resolve(dialog.returnValue === "confirm"), { once: true });
      dialog.showModal();
    });
  }

  // Calls `op`; on CONFIRMATION_REQUIRED shows the proposal and, once confirmed, calls again with
  // confirm. Returns the output, or null when it was refused or not confirmed (the notice says so;
  // `refused`, when given, also gets the refusal's error: its code, message and field).
  async function perform(op, body, done, refused) {
    const refuse = (err) => {
      notice(describeError(err), true);
      if (refused && err instanceof OperationError) refused(err.error);
      return null;
    };
    notice("");
    try {
      const output = await call(op, body, false);
      if (done) notice(done);
      return output;
    } catch (err) {
      if (!(err instanceof OperationError) || err.error.code !== "CONFIRMATION_REQUIRED") return refuse(err);
      if (!(await ask(err.error.proposal || {}))) {
        notice("Nothing was changed.");
        return null;
      }
    }
    try {
      const output = await call(op, body, true);
      if (done) notice(done);
      return output;
    } catch (err) {
      return refuse(err);
    }
  }

  async function load(op, targetId, render) {
    const target = document.getElementById(targetId);
    if (!target) return null;
    try {
      const output = await call(op, {});
      target.replaceChildren(render(output));
      return output;
    } catch (err) {
      target.replaceChildren(el("p", { class: "errors" }, describeError(err)));
      return null;
    }
  }

  function onSubmit(formId, handler) {
    const form = document.getElementById(formId);
    if (!form) return;
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const submit = form.querySelector('button[type="submit"]');
      if (submit) submit.disabled = true;
      try {
        await handler(form);
      } finally {
        if (submit) submit.disabled = false;
      }
    });
  }

  const names = (text) => text.split(",").map((s) => s.trim()).filter(Boolean);

  // ------------------------------------------------------------ pages

  const pages = {};

  pages.outbound = () => {
    // the approval link an assistant hands on names its request: that one is picked out (or its fate told)
    const named = new URLSearchParams(window.location.search).get("request");
    const recipients = (r) => list([...r.to, ...r.cc.map((a) => `${a} (cc)`), ...r.bcc.map((a) => `${a} (bcc)`)]);
    const show = async (targetId, state, render, empty) => {
      const target = document.getElementById(targetId);
      try {
        const out = await call("list_outbound", { state });
        target.replaceChildren(out.requests.length ? el("div", {}, out.requests.map(render)) : el("p", { class: "hint" }, empty));
        return out.requests.map((r) => r.request.request_id);
      } catch (err) {
        target.replaceChildren(el("p", { class: "errors" }, describeError(err)));
        return [];
      }
    };
    const pickOut = async (shown) => {
      const note = document.getElementById("outbound-named");
      if (!named || !note) return;
      const article = document.querySelector(`article[data-request-id="${CSS.escape(named)}"]`);
      if (article && shown.includes(named)) {
        article.classList.add("selected");
        article.setAttribute("aria-current", "true");
        article.scrollIntoView({ block: "center" });
        note.replaceChildren(el("p", { class: "hint" }, "The request your assistant sent you here for is marked below."));
        return;
      }
      try {
        const r = await call("get_outbound_request", { request_id: named });
        note.replaceChildren(el("p", { class: "hint" }, `The request this link names is no longer waiting: ${r.state.replace("_", " ")}. ${r.next}`));
      } catch (err) {
        note.replaceChildren(el("p", { class: "errors" }, describeError(err)));
      }
    };
    const size = (n) => (n >= 1048576 ? `${(n / 1048576).toFixed(1)} MB` : n >= 1024 ? `${Math.ceil(n / 1024)} KB` : `${n} bytes`);
    const files = (r) => list(r.files.map((f) => `${f.filename} (${f.content_type}, ${size(f.size)})`));
    const waiting = (r) => {
      const body = el("pre", {}, r.body + (r.body_truncated ? "\n…" : ""));
      const approve = button("Approve and send", () => decide("approve_outbound", r, "Approved: it is queued for delivery."), { "data-action": "approve" });
      const parts = [body];
      if (r.body_truncated) {
        // what is approved is what is sent: the whole of it is read first
        approve.disabled = true;
        const whole = button(`Show the whole message (${r.body_chars} characters) before approving`, async () => {
          try {
            const out = await call("list_outbound", { request_id: r.request.request_id });
            const found = out.requests[0];
            if (!found || found.request.content_hash !== r.request.content_hash) return refresh();
            body.textContent = found.body;
            approve.disabled = false;
            whole.remove();
          } catch (err) {
            notice(describeError(err), true);
          }
        }, { "data-action": "show-whole" });
        parts.push(whole, " ");
      }
      return el("article", { class: "outbound", "data-request-id": r.request.request_id },
        el("h2", {}, r.subject || "(no subject)"),
        el("p", {}, `From ${r.request.sender} to ${recipients(r)}`),
        el("p", { class: "hint" }, `Requested ${when(r.request.created_at)} by ${r.principal === "agent" ? "an assistant" : r.requested_by}` +
          (r.request.send_at ? `, to be sent ${when(r.request.send_at)}` : "")),
        r.files.length ? el("p", {}, `Attachments: ${files(r)}`) : "",
        ...parts,
        approve,
        " ",
        button("Reject", () => decide("reject_outbound", r, "Rejected: it will not be sent."), { "data-action": "reject" }),
      );
    };
    const unknown = (r) =>
      el("article", { class: "outbound", "data-request-id": r.request.request_id },
        el("h2", {}, r.subject || "(no subject)"),
        el("p", {}, `From ${r.request.sender} to ${recipients(r)}`),
        el("p", { class: "hint" }, `Requested ${when(r.request.created_at)}; Message-ID ${r.request.message_id}; ${r.request.attempts} attempt(s), last: ${r.request.error || "—"}`),
        button("It was sent", () => settle(r, "sent", "Recorded as sent."), { "data-action": "settle-sent" }),
        " ",
        button("It was not sent", () => settle(r, "not_sent", "Recorded as not sent: it will not be sent again."), { "data-action": "settle-not-sent" }),
      );
    const refresh = () => Promise.all([
      show("outbound-list", "awaiting_approval", waiting, "Nothing is waiting for your approval."),
      show("outbound-unknown", "unknown", unknown, "No request has an unknown outcome."),
    ]).then(([waitingIds, unknownIds]) => pickOut([...waitingIds, ...unknownIds]));
    const decide = async (op, r, done) => {
      const body = { request_id: r.request.request_id };
      if (op === "approve_outbound") body.content_hash = r.request.content_hash; // approve exactly what is shown
      if (await perform(op, body, done)) refresh();
    };
    const settle = async (r, outcome, done) => {
      if (await perform("settle_outbound_request", { request_id: r.request.request_id, outcome }, done)) refresh();
    };
    refresh();
  };

  pages.keys = () => {
    const status = (k) => {
      if (k.revoked) return el("span", { class: "status-revoked" }, "revoked");
      if (k.expires_at && new Date(k.expires_at) <= new Date()) return el("span", { class: "status-expired" }, "expired");
      return "active";
    };
    const refresh = () =>
      load("list_api_keys", "keys-list", (out) =>
        out.api_keys.length
          ? table(
              ["Name", "Prefix", "Permissions", "Workspaces", "Operations", "Created", "Expires", "Last used", "Status", ""],
              out.api_keys.map((k) =>
                row({ "data-key-id": k.id, "data-prefix": k.prefix }, [
                  k.name || "—",
                  el("code", {}, `${k.prefix}_…`),
                  list(k.scopes),
                  list(k.workspaces, "every workspace"),
                  k.operations ? list(k.operations, "none") : "all its permissions allow",
                  when(k.created_at),
                  k.expires_at ? when(k.expires_at) : "never",
                  k.last_used_at ? when(k.last_used_at) : "never",
                  status(k),
                  k.revoked ? "" : button("Revoke", () => revoke(k), { "data-action": "revoke" }),
                ]),
              ),
            )
          : el("p", { class: "hint" }, "No keys yet."),
      );
    const revoke = async (k) => {
      if (await perform("revoke_api_key", { api_key_id: k.id }, `Key ${k.prefix} is revoked.`)) refresh();
    };
    const shown = document.getElementById("new-key");
    const value = document.getElementById("new-key-value");
    document.getElementById("copy-key").addEventListener("click", async () => {
      const result = document.getElementById("copy-result");
      try {
        await navigator.clipboard.writeText(value.textContent);
        result.textContent = "Copied.";
      } catch (_) {
        const range = document.createRange();
        range.selectNodeContents(value);
        window.getSelection().removeAllRanges();
        window.getSelection().addRange(range);
        result.textContent = "Selected: press Ctrl+C (⌘C) to copy.";
      }
    });
    onSubmit("create-key", async (form) => {
      const data = new FormData(form);
      const body = {
        name: (data.get("name") || "").trim(),
        scopes: [...form.querySelectorAll('input[name="scopes"]:checked')].map((i) => i.value),
        workspaces: names(data.get("workspaces") || ""),
      };
      const operations = names(data.get("operations") || "");
      if (operations.length) body.operations = operations;
      const days = (data.get("expires_in_days") || "").trim();
      if (days) body.expires_in_days = Number(days);
      const out = await perform("create_api_key", body);
      if (!out) return;
      value.textContent = out.key;
      shown.hidden = false;
      document.getElementById("copy-result").textContent = "";
      form.reset();
      notice(`Key ${out.api_key.prefix} is created.`);
      shown.scrollIntoView();
      refresh();
    });
    refresh();
  };

  pages.connections = () => {
    const refresh = () =>
      load("list_connections", "connections-list", (out) =>
        out.connections.length
          ? table(
              ["Assistant", "Returns to", "Permissions", "Workspaces", "Connected", "Ends", "Last used", "Status", ""],
              out.connections.map((c) =>
                row({ "data-connection-id": c.id }, [
                  c.client_name || "—",
                  c.redirect_host || "—",
                  list(c.scopes),
                  list(c.workspaces, "every workspace"),
                  when(c.created_at),
                  c.expires_at ? when(c.expires_at) : "when revoked",
                  c.last_used_at ? when(c.last_used_at) : "never",
                  c.revoked ? el("span", { class: "status-revoked" }, "revoked") : "active",
                  c.revoked ? "" : button("Revoke", () => revoke(c), { "data-action": "revoke" }),
                ]),
              ),
            )
          : el("p", { class: "hint" }, "No assistant is connected."),
      );
    const revoke = async (c) => {
      if (await perform("revoke_connection", { connection_id: c.id }, "The connection is revoked.")) refresh();
    };
    refresh();
  };

  pages.workspaces = (role) => {
    const admin = role === "ADMIN" || role === "OWNER";
    const rename = async (w, input) => {
      const name = input.value.trim();
      if (!name || name === w.name) return;
      if (await perform("rename_workspace", { workspace_id: w.id, name }, `Workspace ${w.name} is now ${name}.`)) refresh();
    };
    const renameCell = (w) => {
      if (!admin || w.name === "default") return "";
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
  };

  pages.members = (role) => {
    const admin = role === "ADMIN" || role === "OWNER";
    const roles = role === "OWNER" ? ["MEMBER", "ADMIN", "OWNER"] : ["MEMBER", "ADMIN"];
    const roleCell = (m) => {
      if (!admin || (m.role === "OWNER" && role !== "OWNER")) return m.role;
      const select = el("select", { "aria-label": `Role of ${m.email}` }, roles.map((r) => el("option", { value: r, selected: r === m.role }, r)));
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
      if (!m.you && (!admin || (m.role === "OWNER" && role !== "OWNER"))) return "";
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
  };

  pages.exposure = () => {
    const set = async (target, level) => {
      if (await perform("set_operation_exposure", { operation: target, level }, `${target} is now ${level}.`)) refresh();
    };
    const action = (op) => {
      if (op.ceiling === "never") return el("span", { class: "hint" }, "never offered");
      return op.offered_to_agents
        ? button("Stop offering", () => set(op.name, "off"), { "data-action": "off" })
        : button("Offer", () => set(op.name, "on"), { "data-action": "on" });
    };
    const group = (title, plugin, ops) => {
      const header = [el("h2", {}, title)];
      if (plugin) {
        header.push(
          el("p", { class: "hint" }, "A plugin's operations start off. Switching the plugin off withdraws all of them at once."),
          button("Switch the whole plugin off", () => set(`plugin:${plugin}`, "off")),
          " ",
          button("Lift the plugin switch", () => set(`plugin:${plugin}`, "on")),
        );
      }
      return el(
        "section",
        { "data-plugin": plugin || "" },
        header,
        table(
          ["Operation", "Class", "Ceiling", "This tenant's setting", "Offered to agents", ""],
          ops.map((op) =>
            row({ "data-operation": op.name }, [el("code", {}, op.name), op.op_class, op.ceiling, op.setting || "default", op.offered_to_agents ? "yes" : "no", action(op)]),
          ),
        ),
      );
    };
    const refresh = () =>
      load("list_operation_exposure", "exposure-list", (out) => {
        const groups = new Map();
        for (const op of out.operations) {
          const key = op.plugin || "";
          if (!groups.has(key)) groups.set(key, []);
          groups.get(key).push(op);
        }
        const keys = [...groups.keys()].sort();
        return el("div", {}, keys.map((k) => group(k ? `Plugin: ${k}` : "Built-in operations", k, groups.get(k))));
      });
    refresh();
  };

  pages.mailboxes = (role) => {
    const admin = role === "ADMIN" || role === "OWNER";
    const lastSync = (a) => (a.kind === "imap" ? (a.last_synced_at ? when(a.last_synced_at) : "not yet") : "—");
    const actions = (a) => {
      const buttons = [];
      if (a.kind === "imap") buttons.push(button("Sync now", () => syncNow(a), { "data-action": "sync" }));
      if (admin) buttons.push(button("Remove", () => remove(a), { "data-action": "remove" }));
      return el("span", {}, buttons.flatMap((b, i) => (i ? [" ", b] : [b])));
    };
    const refresh = () =>
      load("list_accounts", "accounts-list", (out) =>
        out.accounts.length
          ? table(
              ["Name", "Kind", "Address", "Workspace", "Last sync", "Sync error", ""],
              out.accounts.map((a) =>
                row({ "data-account-id": a.id }, [
                  a.name,
                  a.kind === "imap" ? "IMAP/SMTP" : "imported",
                  a.email_address || "—",
                  a.workspace,
                  lastSync(a),
                  a.sync_error ? el("span", { class: "errors", "data-sync-error": true }, a.sync_error) : "",
                  actions(a),
                ]),
              ),
            )
          : el("p", { class: "hint" }, "No mail accounts yet."),
      );
    const syncNow = async (a) => {
      if (await perform("sync_mailbox", { account_id: a.id }, `${a.name}: a sync is on its way.`)) refresh();
    };
    const remove = async (a) => {
      const out = await perform("remove_mailbox", { account_id: a.id });
      if (!out) return;
      notice(`${a.name} is removed with the ${out.messages_removed} messages Oaken held for it.`);
      refresh();
    };
    const form = document.getElementById("connect-mailbox");
    if (form) {
      const select = document.getElementById("mailbox-workspace");
      call("list_workspaces", {}).then(
        (out) => select.replaceChildren(...out.workspaces.map((w) => el("option", { value: w.name, selected: w.name === "default" }, w.name))),
        () => {}, // the "default" option stays
      );
      const slots = [...form.querySelectorAll("[data-error-for]")];
      const clearErrors = () => slots.forEach((slot) => { slot.textContent = ""; slot.hidden = true; });
      const showError = (error) => {
        const slot = slots.find((s) => s.dataset.errorFor === error.field);
        if (!slot) return;
        slot.textContent = error.message || error.code;
        slot.hidden = false;
        const input = form.elements.namedItem(error.field);
        if (input && input.focus) input.focus();
      };
      onSubmit("connect-mailbox", async () => {
        clearErrors();
        const value = (name) => (form.elements.namedItem(name).value || "").trim();
        const server = (part) => {
          const settings = { host: value(`${part}.host`), security: value(`${part}.security`) };
          if (value(`${part}.port`)) settings.port = Number(value(`${part}.port`));
          if (value(`${part}.username`)) settings.username = value(`${part}.username`);
          const password = form.elements.namedItem(`${part}.password`).value; // passwords are sent as typed
          if (password) settings.password = password;
          return settings;
        };
        const body = { account_name: value("account_name"), workspace: value("workspace"), imap: server("imap"), smtp: server("smtp") };
        if (value("email_address")) body.email_address = value("email_address");
        for (const part of ["imap", "smtp"]) form.elements.namedItem(`${part}.password`).value = ""; // never kept in the page
        const out = await perform("connect_mailbox", body, null, showError);
        if (!out) return;
        form.reset();
        notice(`${out.name} is connected; its mail is syncing.`);
        refresh();
      });
    }
    refresh();
  };

  pages.budgets = () => {
    const kinds = { apikey: "API key", oauth: "Connection", policy: "Send policy", person: "Person" };
    const target = document.getElementById("budgets-list");
    const more = document.getElementById("budgets-more");
    const stale = document.getElementById("budgets-stale");
    const body = el("tbody");
    let cursor = null;
    const what = (b) => (b.prefix ? el("span", {}, b.name ? `${b.name} ` : "", el("code", {}, `${b.prefix}_…`)) : b.name || "—");
    const thisHour = (b) => {
      const h = b.current_hour;
      const figure = `${h.used} of ${b.limit_per_hour} (${h.left} left)`;
      if (h.live) return figure;
      return el("span", { "data-rolled-up": true }, `${figure}, ${h.rolled_up_at ? `as rolled up ${when(h.rolled_up_at)}` : "none rolled up yet"}`);
    };
    const lastDay = (b) =>
      el("span", { title: b.last_24_hours.map((h) => `${when(h.starts_at)}: ${h.used}`).join("\n") || null }, String(b.used_last_24_hours));
    const status = (b) => (b.active ? "active" : el("span", { class: "status-revoked" }, b.kind === "person" ? "deactivated" : "revoked or expired"));
    const next = async () => {
      more.disabled = true;
      try {
        const out = await call("list_send_budgets", cursor ? { cursor } : {});
        body.append(...out.budgets.map((b) =>
          row({ "data-budget-kind": b.kind, "data-budget-id": b.id }, [kinds[b.kind] || b.kind, what(b), b.person, thisHour(b), lastDay(b), status(b)]),
        ));
        if (!cursor) {
          const headers = ["Budget", "What", "Whose", "This hour", "Last 24 hours", "Status"].map((h) => el("th", { scope: "col" }, h));
          target.replaceChildren(out.budgets.length ? el("table", {}, el("thead", {}, el("tr", {}, headers)), body) : el("p", { class: "hint" }, "No budgets in use."));
        }
        stale.textContent = out.live ? "" : "The budget counters cannot be read right now: this hour shows the figures last rolled up.";
        stale.hidden = out.live;
        cursor = out.next_cursor;
        more.hidden = !cursor;
      } catch (err) {
        target.replaceChildren(el("p", { class: "errors" }, describeError(err)));
      } finally {
        more.disabled = false;
      }
    };
    more.addEventListener("click", next);
    next();
  };

  // ------------------------------------------------------------ start

  document.addEventListener("DOMContentLoaded", () => {
    for (const select of document.querySelectorAll("select[data-autosubmit]")) {
      select.addEventListener("change", () => select.form.submit());
    }
    const main = document.querySelector("main[data-page]");
    const page = main && pages[main.dataset.page];
    if (page && main.dataset.role) page(main.dataset.role); // no role: no tenant to act in
  });
})();
