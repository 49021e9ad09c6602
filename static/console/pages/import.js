// /import: upload an mbox file, an .eml file or a zip of them (the REST door stores it and calls upload_import),
// then follow the import a worker runs: its counts as each batch commits (get_import), then its failures with
// their reason; and the tenant's imports (list_imports), newest first, a page at a time. The operations decide
// everything, the size bound included: a refusal is shown as the server words it.
import { call, describeError, el, notice, onSubmit, post, row, table, when } from "../lib.js";

const POLL_MS = 700;
const ENDED = new Set(["done", "failed"]);

// The file as the request's body (never read whole into the page), with its name and account in the address.
async function upload(file, accountName, workspaceId) {
  const query = new URLSearchParams({ filename: file.name || "upload", account_name: accountName || "Imported" });
  if (workspaceId) query.set("workspace_id", workspaceId);
  return post(`/api/v1/imports/upload?${query}`, "application/octet-stream", file);
}

const STATES = { queued: "Waiting for a worker", running: "Importing", done: "Done", failed: "Failed" };

function percent(job) {
  if (job.state === "done") return 100;
  if (!job.total) return 0;
  return Math.min(100, Math.floor((job.read * 100) / job.total));
}

function words(job) {
  const of = job.total === null || job.total === undefined ? "" : ` of ${job.total}`;
  const state = STATES[job.state] || job.state;
  const reason = job.state === "failed" && job.error ? ` (${job.error})` : "";
  return `${state}${reason}: ${job.read}${of} messages read, ${percent(job)}%.`;
}

function showProgress(job) {
  document.getElementById("import-progress").hidden = false;
  document.getElementById("progress-name").textContent = job.source_name;
  const bar = document.getElementById("import-bar");
  bar.value = percent(job);
  bar.dataset.state = job.state;
  document.getElementById("progress-words").textContent = words(job);
  for (const key of ["read", "imported", "duplicates", "failed"]) {
    document.querySelector(`[data-count="${key}"]`).textContent = String(job[key]);
  }
}

function showFailures(job) {
  const box = document.getElementById("import-failures");
  if (!job.failures || !job.failures.length) {
    box.replaceChildren();
    return;
  }
  const rows = job.failures.map((f) => row({ "data-failure": "" }, [f.position, f.reason]));
  const more = job.failures_truncated ? [el("p", { class: "hint" }, "More messages failed than are listed here.")] : [];
  box.replaceChildren(el("h3", {}, "Messages that could not be imported"), table(["Where in the file", "Why"], rows), ...more);
}

async function follow(importId) {
  for (;;) {
    let job;
    try {
      job = await call("get_import", { import_id: importId });
    } catch (err) {
      notice(describeError(err), true);
      return;
    }
    showProgress(job);
    if (ENDED.has(job.state)) {
      showFailures(job);
      notice(job.state === "done" ? "The import is done." : `The import failed: ${job.error}.`, job.state !== "done");
      await loadImports();
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

function importRow(job) {
  const cells = [job.source_name, job.account_name, STATES[job.state] || job.state, String(job.imported), String(job.duplicates), String(job.failed), when(job.started_at)];
  return row({ "data-import": job.import_id }, cells);
}

// the newest page of imports; "Show older imports" adds the next page below it (list_imports' cursor)
const IMPORTS_PAGE = 20;
const moreImports = document.getElementById("imports-more");
let importsCursor = null;

async function loadImports(more) {
  const target = document.getElementById("imports-list");
  const tbody = target.querySelector("tbody");
  const adding = more === true && importsCursor && tbody;
  try {
    const output = await call("list_imports", { limit: IMPORTS_PAGE, ...(adding ? { cursor: importsCursor } : {}) });
    if (adding) tbody.append(...output.imports.map(importRow));
    else {
      target.replaceChildren(
        output.imports.length
          ? table(["File", "Account", "State", "Imported", "Duplicates", "Failed", "Started"], output.imports.map(importRow))
          : el("p", { class: "hint" }, "Nothing has been imported yet."),
      );
    }
    importsCursor = output.next_cursor;
    moreImports.hidden = !importsCursor;
  } catch (err) {
    if (adding) notice(describeError(err), true);
    else target.replaceChildren(el("p", { class: "errors" }, describeError(err)));
  }
}

moreImports.addEventListener("click", async () => {
  moreImports.disabled = true;
  try {
    await loadImports(true);
  } finally {
    moreImports.disabled = false;
  }
});

onSubmit("upload-form", async (form) => {
  const file = form.elements.namedItem("file").files[0];
  if (!file) {
    notice("Choose a file to import first.", true);
    return;
  }
  notice("Uploading…");
  let job;
  try {
    job = await upload(file, form.elements.namedItem("account_name").value.trim(), form.elements.namedItem("workspace_id").value);
  } catch (err) {
    notice(describeError(err), true);
    return;
  }
  notice("");
  showProgress(job);
  showFailures({ failures: [] });
  await follow(job.import_id);
});

// a choice of workspace only where there is one to make (the default workspace otherwise)
async function loadWorkspaces() {
  try {
    const { workspaces } = await call("list_workspaces", {});
    if (workspaces.length < 2) return;
    const select = document.getElementById("import-workspace");
    select.replaceChildren(...workspaces.map((w) => el("option", { value: w.id, selected: w.name === "default" }, w.name)));
    document.getElementById("workspace-field").hidden = false;
  } catch (_) {
    // the default workspace, as the operation takes it when none is named
  }
}

loadWorkspaces();
loadImports();
