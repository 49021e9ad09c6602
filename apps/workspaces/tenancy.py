"""Tenant ownership: ids, and the manager that makes every query name its tenant."""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from django.db import models

if TYPE_CHECKING:
    from apps.workspaces.models import Tenant


class _RandomPool(threading.local):
    """OS randomness fetched in blocks: one getrandom() call per id is slow on busy imports."""

    block = 16 * 1024

    def __init__(self) -> None:
        self.pid, self.buffer, self.offset = 0, b"", 0

    def take(self, n: int) -> bytes:
        if self.pid != os.getpid() or self.offset + n > len(self.buffer):
            # a forked child must never reuse its parent's bytes
            self.pid, self.buffer, self.offset = os.getpid(), os.urandom(self.block), 0
        chunk = self.buffer[self.offset : self.offset + n]
        self.offset += n
        return chunk


_random = _RandomPool()


def new_id() -> uuid.UUID:
    """A random UUID whose leading bits are the time (UUIDv7 layout), so new rows index in order."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(_random.take(10), "big")
    value = (millis & ((1 << 48) - 1)) << 80 | rand & ((1 << 80) - 1)
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return uuid.UUID(int=value)


class UnscopedQueryError(RuntimeError):
    """Tenant-owned rows were queried without naming the tenant."""


_M = TypeVar("_M", bound=models.Model)


class TenantQuerySet(models.QuerySet[_M], Generic[_M]):
    def for_tenant(self, tenant: Tenant) -> TenantQuerySet[_M]:
        """Rows of this tenant only."""
        if tenant is None or getattr(tenant, "pk", None) is None:
            raise UnscopedQueryError("for_tenant() needs a saved tenant")
        return self.filter(tenant=tenant)


# Manager methods that would read or write rows across every tenant.
_UNSCOPED_ENTRY_POINTS = (
    "all", "filter", "exclude", "get", "get_or_create", "update_or_create", "count", "exists",
    "first", "last", "iterator", "values", "values_list", "aggregate", "annotate", "alias",
    "order_by", "in_bulk", "update", "delete", "select_related", "prefetch_related", "only",
    "defer", "distinct", "latest", "earliest", "bulk_update", "raw", "select_for_update",
)  # fmt: skip


def _refuse(name: str) -> Any:
    def method(self: models.Manager[Any], *args: Any, **kwargs: Any) -> Any:
        # Related managers (message.attachments) are already narrowed to one parent row.
        if getattr(self, "instance", None) is not None:
            return getattr(self.get_queryset(), name)(*args, **kwargs)
        raise UnscopedQueryError(
            f"{self.model.__name__}.objects.{name}() reads every tenant: use .for_tenant(tenant) first"
        )

    method.__name__ = name
    return method


class TenantManager(models.Manager.from_queryset(TenantQuerySet)):  # type: ignore[misc]
    """`Model.objects.for_tenant(t)` is the way in; `unscoped()` marks the rare cross-tenant job."""

    def for_tenant(self, tenant: Tenant) -> TenantQuerySet[Any]:
        return self.get_queryset().for_tenant(tenant)

    def unscoped(self) -> TenantQuerySet[Any]:
        """Every tenant's rows, for system jobs (verification, maintenance), never for a caller."""
        return self.get_queryset()


for _name in _UNSCOPED_ENTRY_POINTS:
    setattr(TenantManager, _name, _refuse(_name))


class TenantOwned(models.Model):
    """A row of customer data: it carries its tenant, and is only reached through it."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    tenant = models.ForeignKey("workspaces.Tenant", on_delete=models.CASCADE, related_name="+")

    objects = TenantManager()

    class Meta:
        abstract = True
