"""Importing mbox files, Maildirs and .eml folders into a local mail account."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

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
from apps.mail.sources import RawItem, SourceError, detect_kind, iter_source
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


def ensure_local_account(*, tenant: Tenant, workspace: Workspace, name: str) -> MailAccount:
    """The workspace's local account with this name, created (with its standard folders) if missing."""
    account = MailAccount.objects.for_tenant(tenant).filter(workspace=workspace, name=name).first()
    if account is None:
        with transaction.atomic():
            account = MailAccount.objects.create(tenant=tenant, workspace=workspace, name=name, kind=AccountKind.LOCAL)
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
        self.run.save(update_fields=["imported", "duplicates", "failed"])


def import_mail(
    *, tenant: Tenant, workspace: Workspace, account_name: str, path: Path, batch_size: int | None = None
) -> ImportCounts:
    """Import every message at `path` into the named local account; failures are recorded, not fatal."""
    try:
        kind = detect_kind(path)
    except (SourceError, OSError) as exc:
        raise ImportRefusedError(
            "INVALID_INPUT", "path is not a readable mbox file, Maildir or .eml folder", "path"
        ) from exc
    account = ensure_local_account(tenant=tenant, workspace=workspace, name=account_name)
    run = ImportRun.objects.create(tenant=tenant, account=account, source_name=path.name[:255], source_kind=kind)
    importer = _Importer(run, account)
    size = batch_size or settings.OPERATIONS["IMPORT_BATCH_SIZE"]
    try:
        with long_lived_frozen(), parse_pool(settings.OPERATIONS["IMPORT_MAX_MESSAGE_BYTES"]) as start_parsing:
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
