"""Importing mail files from the server's disk into a local account (`oaken import-mail`, the import task).

An import makes or fills a mail account in a workspace, which is an ADMIN's to manage (SPEC §2), as connecting
a mailbox is. The input names a file on the server, so only the server's own side may call it: a person at its
command line (the cli door) and the system's tasks (the internal door), never a door over the network. The
import commits a batch of messages at a time; its audit event carries the counts, never the path or mail.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, field_validator

from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.mail.importing import ImportRefusedError, import_mail
from apps.mail.models import AccountKind, MailAccount
from apps.mail.sources import SourceError, detect_kind
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Id, Name
from apps.operations.registry import NEVER, Callers, Ceiling, OpClass, operation
from apps.workspaces.models import DEFAULT_WORKSPACE, Workspace

_UNREADABLE = "is not a readable mbox file, Maildir or .eml folder"


class ImportIn(Closed):
    path: str = Field(
        min_length=1, max_length=4096, description="an mbox file, a Maildir or a folder of .eml files on the server"
    )
    workspace: str = Field(default=DEFAULT_WORKSPACE, min_length=1, max_length=100, description="by name")
    workspace_id: Id | None = Field(default=None, description="the workspace by id, instead of by name")
    account_name: Name = Field(default="Imported", description="the local account, created if missing")

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        # the caller's working directory is not the worker's: a relative path would mean something else there
        if "\x00" in value or not os.path.isabs(value):
            raise ValueError("must be an absolute path")
        return value


class ImportOut(Closed):
    imported: int
    duplicates: int
    failed: int
    account_id: str
    import_id: str


def _workspace(ctx: Context, data: ImportIn) -> Workspace:
    if data.workspace_id is not None:
        if "workspace" in data.model_fields_set:
            raise OakenError.invalid("workspace_id", "name the workspace by name or by id, not both")
        found = Workspace.objects.for_tenant(ctx.tenant).filter(pk=parse_id(data.workspace_id, "workspace_id"))
        field = "workspace_id"
    else:
        found = Workspace.objects.for_tenant(ctx.tenant).filter(name=data.workspace)
        field = "workspace"
    workspace = found.first()
    if workspace is None:
        raise OakenError.not_found(field)
    return workspace


def _destination(ctx: Context, data: ImportIn) -> Workspace:
    """The workspace the mail goes to, where the account named is a local one (or not there yet)."""
    workspace = _workspace(ctx, data)
    named = MailAccount.objects.for_tenant(ctx.tenant).filter(workspace=workspace, name=data.account_name)
    if named.exclude(kind=AccountKind.LOCAL).exists():
        raise OakenError.invalid("account_name", "mail can only be imported into a local account")
    return workspace


def _readable(ctx: Context, data: ImportIn) -> None:
    """The path is a mail source the importer reads; the answer never repeats it (it can name people's files)."""
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
        counts = import_mail(
            tenant=ctx.tenant, workspace=ctx.targets, account_name=data.account_name, path=Path(data.path)
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
