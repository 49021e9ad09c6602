// What every console page shares: the REST call, the confirmation dialog, and building the page.
//
// Every action calls an operation over the REST door (POST /api/v1/ops/<name>, JSON, the session
// cookie and X-CSRFToken), exactly as the API documents it. A change that needs confirmation
// answers CONFIRMATION_REQUIRED with a proposal: the person sees it and, if they confirm, the same
// call is sent again with ?confirm=true. Text from the server is only ever set as text (never as
// HTML): names and client names can be chosen by anyone. The pages hold no rule of their own:
// what a person may do to a row comes with the row (e.g. `assignable_roles`, `renamable`).

const csrfToken = () => {
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
};

export class OperationError extends Error {
  constructor(error) {
    super(error.message);
    this.error = error;
  }
}

export async function call(op, body, confirm) {
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

export function el(tag, attrs, ...children) {
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

export const when = (iso) => (iso ? new Date(iso).toLocaleString() : "—");
export const list = (items, empty) => (items && items.length ? items.join(", ") : empty);

// A table in a box of its own that scrolls sideways on a narrow screen, so the page itself never does.
export function table(headers, rows) {
  const head = el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col" }, h))));
  return el("div", { class: "table-wrap", tabindex: "0" }, el("table", {}, head, el("tbody", {}, rows)));
}

export function row(attrs, cells) {
  return el("tr", attrs, cells.map((c) => el("td", {}, c)));
}

// "What it did": the audit log of one API key ("apikey") or connection ("oauth")
export function auditLink(kind, id, name) {
  const query = new URLSearchParams({ credential_kind: kind, credential_id: id });
  return el("a", { href: `/audit?${query}`, "data-action": "audit", "aria-label": `What ${name} did` }, "What it did");
}

export function button(label, onClick, attrs) {
  return el("button", { type: "button", onclick: onClick, ...(attrs || {}) }, label);
}

// ------------------------------------------------------------ notices and confirmation

export function notice(text, isError) {
  const box = document.getElementById("notice");
  if (!box) return;
  box.textContent = text || "";
  box.className = isError ? "errors" : "";
  box.hidden = !text;
}

export function describeError(err) {
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
export async function perform(op, body, done, refused) {
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

// Calls `op` and shows render(output) in the element `targetId` (or why it failed); the output, or null.
export async function load(op, targetId, render) {
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

// Runs handler(form) on submit instead of sending the form, its submit button disabled meanwhile.
export function onSubmit(formId, handler) {
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

export const names = (text) => text.split(",").map((s) => s.trim()).filter(Boolean);
