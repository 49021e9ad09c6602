"""Importing mail files into a local account: from the server's disk (`oaken import-mail`, the import task), or
uploaded in the console (upload_import, then the import task runs import_mail on it).

An import makes or fills a mail account in a workspace, which is an ADMIN's to manage (SPEC §2), as connecting
a mailbox is. import_mail's input names a file on the server (or an upload's import), so only the server's own
side may call it: a person at its command line (the cli door) and the system's tasks (the internal door), never
a door over the network. The import commits a batch of messages at a time, so its counts move while it runs
(list_imports, get_import); its audit event carries the counts, never the path, the file's name or mail.
An upload is spooled by the REST door (POST /api/v1/imports/upload) with IMPORT_UPLOAD_MAX_BYTES counted while
it streams; upload_import decides what becomes of it, the bound included, and is audited either way.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db.models import Q
from pydantic import ConfigDict, Field, field_validator

from apps.core import uploads
from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.core.pages import cut_page, read_cursor
from apps.mail.importing import ImportRefusedError, import_mail, import_upload, queue_upload, start_after_commit
from apps.mail.models import AccountKind, ImportRun
from apps.mail.selectors import access_import_by_id, account_name_taken, import_failures, imports_page
from apps.mail.sources import SourceError, detect_kind
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Id, Name, Page
from apps.operations.registry import NEVER, Bound, Callers, Ceiling, OpClass, operation
from apps.workspaces.models import DEFAULT_WORKSPACE, Workspace
from apps.workspaces.selectors import access_workspace_by_id, access_workspace_by_name

_UNREADABLE = "is not a readable mbox file, Maildir or .eml folder"


# the workspace by name or by id, never both (_workspace): published with the input's schema
ONE_WORKSPACE: dict[str, Any] = {
    "not": {"required": ["workspace", "workspace_id"], "properties": {"workspace_id": {"type": "string"}}}
}


class ImportIn(Closed):
    model_config = ConfigDict(json_schema_extra=ONE_WORKSPACE)
    path: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="an mbox file, a Maildir or a folder of .eml files on the server",
    )
    import_id: Id | None = Field(
        default=None, description="instead of a path: an upload's queued import (upload_import), run now"
    )
    workspace: str = Field(default=DEFAULT_WORKSPACE, min_length=1, max_length=100, description="by name")
    workspace_id: Id | None = Field(default=None, description="the workspace by id, instead of by name")
    account_name: Name = Field(default="Imported", description="the local account, created if missing")

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        # the caller's working directory is not the worker's: a relative path would mean something else there
        if value is not None and ("\x00" in value or not os.path.isabs(value)):
            raise ValueError("must be an absolute path")
        return value


class ImportOut(Closed):
    imported: int
    duplicates: int
    failed: int
    account_id: str
    import_id: str


def _workspace(ctx: Context, data: Any) -> Workspace:
    if data.workspace_id is not None:
        if "workspace" in data.model_fields_set:
            raise OakenError.invalid("workspace_id", "name the workspace by name or by id, not both")
        return access_workspace_by_id(data.workspace_id, tenant=ctx.tenant)
    return access_workspace_by_name(tenant=ctx.tenant, name=data.workspace)


def _destination(ctx: Context, data: ImportIn) -> Workspace | ImportRun:
    """The workspace the mail goes to, where the account named is a local one (or not there yet); for an
    upload's import, the queued import itself."""
    if (data.path is None) == (data.import_id is None):
        raise OakenError.invalid("path", "give a path, or an import_id, not both")
    if data.import_id is not None:
        return access_import_by_id(data.import_id, tenant=ctx.tenant)
    return _local_destination(ctx, data)


def _local_destination(ctx: Context, data: Any) -> Workspace:
    workspace = _workspace(ctx, data)
    if account_name_taken(
        tenant=ctx.tenant, workspace=workspace, name=data.account_name, except_kind=AccountKind.LOCAL
    ):
        raise OakenError.invalid("account_name", "mail can only be imported into a local account")
    return workspace


def _readable(ctx: Context, data: ImportIn) -> None:
    """The path is a mail source the importer reads; the answer never repeats it (it can name people's files)."""
    if data.path is None:
        return
    try:
        detect_kind(Path(data.path))
    except (SourceError, OSError, ValueError):
        raise OakenError.invalid("path", _UNREADABLE) from None


@operation(
    name="import_mail",
    summary="Import an mbox file, a Maildir or a folder of .eml files on the server into a local mail account.",
    input=ImportIn,
    output=ImportOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    confirm=NEVER,
    targets=_destination,
    verify=_readable,
    callers=Callers.SERVER,
    commits_in_batches=True,
)
def import_mail_op(ctx: Context, data: ImportIn) -> ImportOut:
    """Messages already in the account (same Message-ID and content) are counted as duplicates, not stored again;
    one that cannot be parsed is recorded with its position and a reason, and the import goes on."""
    try:
        if isinstance(ctx.targets, ImportRun):
            counts = import_upload(run=ctx.targets)
        else:
            assert data.path is not None
            counts = import_mail(
                tenant=ctx.tenant,
                workspace=ctx.targets,
                account_name=data.account_name,
                path=Path(data.path),
                sender_name=ctx.person_name,
            )
    except ImportRefusedError as refused:
        # the checks ran a moment ago: the path or the account changed since
        field = "account_name" if refused.field == "account" else refused.field
        raise OakenError(refused.code, refused.message, field=field) from None
    kept = {"imported": counts.imported, "duplicates": counts.duplicates, "failed": counts.failed}
    ctx.touch(counts.run_id, None, {"account_id": str(counts.account_id), **kept})
    return ImportOut(
        imported=counts.imported,
        duplicates=counts.duplicates,
        failed=counts.failed,
        account_id=str(counts.account_id),
        import_id=str(counts.run_id),
    )


# ---------------------------------------------------------------- an upload from the console, and its progress


class UploadIn(Closed):
    model_config = ConfigDict(json_schema_extra=ONE_WORKSPACE)
    upload: str | None = Field(
        default=None,
        max_length=64,
        description="the token POST /api/v1/imports/upload gave the file it stored (that door calls this for you)",
    )
    size: int = Field(ge=0, description="the file's size in bytes, as the upload door counted it")
    filename: str = Field(min_length=1, max_length=255, description="the file's name, as the person chose it")
    workspace: str = Field(default=DEFAULT_WORKSPACE, min_length=1, max_length=100, description="by name")
    workspace_id: Id | None = Field(default=None, description="the workspace by id, instead of by name")
    account_name: Name = Field(default="Imported", description="the local account, created if missing")


class ImportFailureOut(Closed):
    position: str
    reason: str


class ImportJobOut(Closed):
    import_id: str
    account_id: str
    account_name: str
    source_name: str
    source_kind: str
    state: str
    total: int | None = Field(description="messages in the file, once the import has counted them")
    read: int = Field(description="messages read so far: imported + duplicates + failed")
    imported: int
    duplicates: int
    failed: int
    error: str = Field(description="why the import failed (a reason code), when it did")
    started_at: datetime
    finished_at: datetime | None


class ImportDetailOut(ImportJobOut):
    failures: list[ImportFailureOut] = Field(description="the messages that could not be imported, and why")
    failures_truncated: bool


def _job(run: ImportRun) -> dict[str, Any]:
    return {
        "import_id": str(run.pk),
        "account_id": str(run.account_id),
        "account_name": run.account.name,
        "source_name": run.source_name,
        "source_kind": run.source_kind,
        "state": run.state,
        "total": run.total,
        "read": run.imported + run.duplicates + run.failed,
        "imported": run.imported,
        "duplicates": run.duplicates,
        "failed": run.failed,
        "error": run.error,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
    }


def _upload_within_bound(ctx: Context, data: UploadIn) -> None:
    """After the size (the gate's bound, _UPLOAD_SIZE: a file over it is refused whether or not it was stored; the
    door stops reading it as soon as it knows), the stored file."""
    if data.upload is None:
        raise OakenError.invalid("upload", "is required: upload the file first")
    uploads.access_upload_by_token(data.upload)


_UPLOAD_SIZE = Bound(
    "size", "IMPORT_UPLOAD_MAX_BYTES", message="the file is larger than an import may be ({maximum} bytes at most)"
)


@operation(
    name="upload_import",
    summary="Import an uploaded mbox file, .eml file or zip of them into a local mail account, in a worker.",
    input=UploadIn,
    output=ImportJobOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    confirm=NEVER,
    targets=_local_destination,
    verify=_upload_within_bound,
    callers=Callers.PERSONS,
    bounds=(_UPLOAD_SIZE,),
)
def upload_import(ctx: Context, data: UploadIn) -> ImportJobOut:
    """The file the upload door stored becomes the tenant's, under the import's id; the import is queued and a
    worker runs it (import_mail). Follow it with get_import: its counts move as each batch commits."""
    assert data.upload is not None
    spooled = uploads.access_upload_by_token(data.upload)
    try:
        run = queue_upload(
            tenant=ctx.tenant,
            workspace=ctx.targets,
            account_name=data.account_name,
            spooled=spooled,
            filename=data.filename,
            size=data.size,
            sender_name=ctx.person_name,
        )
    except ImportRefusedError as refused:
        uploads.discard(data.upload)
        raise OakenError(refused.code, refused.message, field=refused.field) from None
    ctx.touch(run.pk, None, {"account_id": str(run.account_id), "state": run.state, "size": data.size})
    start_after_commit(run=run)
    return ImportJobOut.model_validate(_job(run))


class ListImportsIn(Page):
    pass


class ListImportsOut(Closed):
    imports: list[ImportJobOut]
    next_cursor: str | None = Field(description="the next (older) page's cursor; null on the last page")


def _position(run: ImportRun) -> list[str]:
    """Newest first: (started_at, id), as _after reads it back."""
    return [run.started_at.isoformat(), str(run.pk)]


def _after(started_raw: str, pk_raw: str) -> Q:
    started = datetime.fromisoformat(started_raw)
    pk = parse_id(pk_raw, "cursor")
    return Q(started_at__lt=started) | Q(started_at=started, pk__lt=pk)


@operation(
    name="list_imports",
    summary="The tenant's imports, newest first, with their counts as they move, a page at a time.",
    input=ListImportsIn,
    output=ListImportsOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    callers=Callers.PERSONS,
    bounds=(Bound("limit", "PAGE_SIZE_MAX"),),
)
def list_imports(ctx: Context, data: ListImportsIn) -> ListImportsOut:
    size = data.size(ctx.bounds)
    runs = imports_page(tenant=ctx.tenant, after=read_cursor(data.cursor, 2, _after), limit=size + 1)
    page, next_cursor = cut_page(runs, size, _position)
    return ListImportsOut.model_validate({"imports": [_job(run) for run in page], "next_cursor": next_cursor})


class GetImportIn(Closed):
    import_id: Id


@operation(
    name="get_import",
    summary="One import: its state, its counts (read, imported, duplicates, failed of total) and its failures.",
    input=GetImportIn,
    output=ImportDetailOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    callers=Callers.PERSONS,
)
def get_import(ctx: Context, data: GetImportIn) -> ImportDetailOut:
    """The failures name where each message was in the file and why it failed, never its content; at most
    PAGE_SIZE_MAX of them (failures_truncated says when there are more)."""
    run = access_import_by_id(data.import_id, tenant=ctx.tenant)
    limit = ctx.bounds.PAGE_SIZE_MAX
    rows = import_failures(tenant=ctx.tenant, run=run, limit=limit + 1)
    return ImportDetailOut.model_validate(
        {**_job(run), "failures": rows[:limit], "failures_truncated": len(rows) > limit}
    )
