"""Importing mbox files, Maildirs and .eml folders into a local mail account."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from pathlib import Path

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.core import uploads
from apps.core.bounds import bounds
from apps.mail.models import (
    STANDARD_FOLDERS,
    AccountKind,
    Folder,
    FolderKind,
    ImportFailure,
    ImportRun,
    ImportState,
    MailAccount,
)
from apps.mail.pipeline import long_lived_frozen, parse_pool
from apps.mail.rows import MessageRow
from apps.mail.sources import RawItem, SourceError, count_messages, detect_kind, iter_source
from apps.mail.store import MessageStore
from apps.workspaces.models import Tenant, Workspace


class ImportRefusedError(Exception):
    """The import cannot run; `code` is stable and `field` names the argument at fault."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


@dataclass(frozen=True)
class ImportCounts:
    run_id: uuid.UUID
    account_id: uuid.UUID
    imported: int
    duplicates: int
    failed: int


def ensure_local_account(*, tenant: Tenant, workspace: Workspace, name: str, sender_name: str = "") -> MailAccount:
    """The workspace's local account with this name, created (with its standard folders) if missing; a new one's
    sender name is `sender_name` (the importing person's name)."""
    account = MailAccount.objects.for_tenant(tenant).filter(workspace=workspace, name=name).first()
    if account is None:
        with transaction.atomic():
            account = MailAccount.objects.create(
                tenant=tenant, workspace=workspace, name=name, sender_name=sender_name, kind=AccountKind.LOCAL
            )
            Folder.objects.bulk_create(
                Folder(tenant=tenant, account=account, kind=kind, name=kind.label) for kind in STANDARD_FOLDERS
            )
    elif account.kind != AccountKind.LOCAL:
        raise ImportRefusedError("INVALID_INPUT", "mail can only be imported into a local account", "account")
    return account


def _batches(items: Iterator[RawItem], size: int) -> Iterator[list[RawItem]]:
    while batch := list(islice(items, size)):
        yield batch


class _Importer(MessageStore):
    def __init__(self, run: ImportRun, account: MailAccount) -> None:
        super().__init__(account)
        self.run = run
        self.inbox = Folder.objects.for_tenant(self.tenant).get(account=account, kind=FolderKind.INBOX)

    def _placement(self, item: RawItem) -> tuple[uuid.UUID, bool, uuid.UUID | None, int | None]:
        return self.inbox.pk, False, None, None

    def _after_batch(
        self,
        items: list[RawItem],
        fresh: list[tuple[RawItem, MessageRow]],
        duplicates: list[tuple[RawItem, MessageRow]],
        failures: list[tuple[RawItem, str]],
    ) -> None:
        ImportFailure.objects.bulk_create(
            ImportFailure(tenant=self.tenant, run=self.run, position=item.position[:500], reason=reason[:255])
            for item, reason in failures
        )
        self.run.imported += len(fresh)
        self.run.duplicates += len(duplicates)
        self.run.failed += len(failures)
        self.run.updated_at = timezone.now()
        self.run.save(update_fields=["imported", "duplicates", "failed", "updated_at"])


_NOT_MAIL = "is not an mbox file, an .eml file or a zip of them"


def upload_path(run: ImportRun) -> Path:
    return Path(settings.IMPORT_UPLOAD_DIR) / str(run.tenant_id) / run.upload


def queue_upload(
    *,
    tenant: Tenant,
    workspace: Workspace,
    account_name: str,
    spooled: Path,
    filename: str,
    size: int,
    sender_name: str = "",
) -> ImportRun:
    """An import of an uploaded file, queued: the file moves from the spool to the tenant's own folder, under
    the run's id (never the name it came with); the run waits for a worker (start_import_task)."""
    try:
        kind = detect_kind(spooled)
    except (SourceError, OSError) as exc:
        raise ImportRefusedError("INVALID_INPUT", _NOT_MAIL, "file") from exc
    account = ensure_local_account(tenant=tenant, workspace=workspace, name=account_name, sender_name=sender_name)
    run = ImportRun.objects.create(
        tenant=tenant,
        account=account,
        source_name=filename[:255],
        source_kind=kind,
        state=ImportState.QUEUED,
        upload_size=size,
    )
    run.upload = f"{run.pk}.{kind}"
    target = upload_path(run)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(spooled, target)
    run.save(update_fields=["upload"])
    return run


# the task that runs a queued import, by name: it lives in the worker door (apps.worker.tasks), above the domain
START_IMPORT_TASK = "mail.start_import"


def start_after_commit(*, run: ImportRun) -> None:
    """Queue the worker's task for a queued import once the caller's transaction commits; when the broker is
    away, the import fails with a reason instead of waiting forever."""
    tenant_id, import_id = str(run.tenant_id), str(run.pk)

    def start() -> None:
        try:
            current_app.send_task(START_IMPORT_TASK, kwargs={"tenant_id": tenant_id, "import_id": import_id})
        except Exception as exc:
            fail_run(import_id, f"queue_unavailable:{type(exc).__name__}"[:255])

    transaction.on_commit(start)


def fail_run(run_id: uuid.UUID | str, reason: str) -> None:
    """Mark an import that has not ended failed, with a reason (a code, never mail), and drop its upload."""
    run = ImportRun.objects.unscoped().filter(pk=run_id).first()
    if run is None:
        return
    updated = (
        ImportRun.objects.unscoped()
        .filter(pk=run_id, state__in=[ImportState.QUEUED, ImportState.RUNNING])
        .update(state=ImportState.FAILED, error=reason[:255], finished_at=timezone.now())
    )
    if updated and run.upload:
        _drop_upload(run)


def sweep_stale_imports(now: datetime | None = None) -> int:
    """Mark failed every import (of any tenant) queued or running that has not moved for IMPORT_STALE_SECONDS:
    its worker was lost or its task never came. How many were. Spooled uploads as old go too (their request
    never reached upload_import)."""
    before = (now or timezone.now()) - timedelta(seconds=bounds.IMPORT_STALE_SECONDS)
    stale = ImportRun.objects.unscoped().filter(
        state__in=[ImportState.QUEUED, ImportState.RUNNING], updated_at__lt=before
    )
    swept = 0
    for run_id, state in list(stale.values_list("pk", "state")[:500]):
        fail_run(run_id, "worker_lost" if state == ImportState.RUNNING else "never_started")
        swept += 1
    uploads.purge_spool(bounds.IMPORT_STALE_SECONDS)
    return swept


def _drop_upload(run: ImportRun) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(upload_path(run))


def import_upload(*, run: ImportRun, batch_size: int | None = None) -> ImportCounts:
    """Run a queued upload's import (its counts move batch by batch, each batch committed); the upload is
    removed when it ends, whichever way."""
    claimed = (
        ImportRun.objects.for_tenant(run.tenant)
        .filter(pk=run.pk, state=ImportState.QUEUED)
        .update(state=ImportState.RUNNING, started_at=timezone.now(), updated_at=timezone.now())
    )
    if not claimed:
        raise ImportRefusedError("CONFLICT", "this import has already started or ended", "import_id")
    run.refresh_from_db()
    path = upload_path(run)
    try:
        run.total, run.updated_at = count_messages(path), timezone.now()
        run.save(update_fields=["total", "updated_at"])
        return _run_import(run, run.account, path, batch_size)
    except SourceError:
        # the run is marked failed by _run_import, or here when counting failed before it began
        fail_run(run.pk, "unreadable_file")
        raise ImportRefusedError("INVALID_INPUT", _NOT_MAIL, "file") from None
    except BaseException as exc:
        fail_run(run.pk, type(exc).__name__)
        raise
    finally:
        _drop_upload(run)


def import_mail(
    *,
    tenant: Tenant,
    workspace: Workspace,
    account_name: str,
    path: Path,
    batch_size: int | None = None,
    sender_name: str = "",
) -> ImportCounts:
    """Import every message at `path` into the named local account; failures are recorded, not fatal."""
    try:
        kind = detect_kind(path)
    except (SourceError, OSError) as exc:
        raise ImportRefusedError(
            "INVALID_INPUT", "path is not a readable mbox file, Maildir or .eml folder", "path"
        ) from exc
    account = ensure_local_account(tenant=tenant, workspace=workspace, name=account_name, sender_name=sender_name)
    run = ImportRun.objects.create(tenant=tenant, account=account, source_name=path.name[:255], source_kind=kind)
    return _run_import(run, account, path, batch_size)


def _run_import(run: ImportRun, account: MailAccount, path: Path, batch_size: int | None) -> ImportCounts:
    importer = _Importer(run, account)
    size = batch_size or bounds.IMPORT_BATCH_SIZE
    try:
        with long_lived_frozen(), parse_pool(bounds.IMPORT_MAX_MESSAGE_BYTES) as start_parsing:
            previous: tuple[list[RawItem], Callable[[], list[MessageRow | str]]] | None = None
            for batch in _batches(iter_source(path), size):
                pending = (batch, start_parsing(batch))
                if previous is not None:
                    importer.run_batch(previous[0], previous[1]())
                previous = pending
            if previous is not None:
                importer.run_batch(previous[0], previous[1]())
    except Exception as exc:
        run.state, run.error, run.finished_at = ImportState.FAILED, type(exc).__name__, timezone.now()
        run.save(update_fields=["state", "error", "finished_at"])
        raise
    run.state, run.finished_at = ImportState.DONE, timezone.now()
    run.save(update_fields=["state", "finished_at"])
    return ImportCounts(
        run_id=run.pk,
        account_id=account.pk,
        imported=run.imported,
        duplicates=run.duplicates,
        failed=run.failed,
    )
