"""Tenant ownership: ids, and the manager that makes every query name its tenant."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from django.db import models

from apps.core.ids import new_id
from apps.core.kinds import Role

if TYPE_CHECKING:
    from apps.core.callers import Caller
    from apps.workspaces.models import Tenant


class UnscopedQueryError(RuntimeError):
    """Tenant-owned rows were queried without naming the tenant."""


_M = TypeVar("_M", bound=models.Model)


class PersonalQuerySet(models.QuerySet[_M], Generic[_M]):
    """Rows each of which belongs to one person of the tenant: the model names the field (`owner_field`)."""

    def visible_to(self, actor: Caller) -> Self:
        """Mine unless ADMIN: the actor's tenant's rows for an ADMIN or OWNER, the actor's own rows otherwise."""
        owner = getattr(self.model, "owner_field", None)
        if owner is None:
            raise TypeError(f"{self.model.__name__} rows belong to no person: the model names no owner_field")
        # the actor's tenant always, so even a queryset that did not start from for_tenant() stays in it
        rows = self.filter(tenant=actor.tenant)
        return rows if actor.has_role(Role.ADMIN) else rows.filter(**{owner: actor.user})


class TenantQuerySet(PersonalQuerySet[_M], Generic[_M]):
    def for_tenant(self, tenant: Tenant) -> Self:
        """Rows of this tenant only."""
        if tenant is None or getattr(tenant, "pk", None) is None:
            raise UnscopedQueryError("for_tenant() needs a saved tenant")
        return self.filter(tenant=tenant)


# Manager methods that would read or write rows across every tenant.
_UNSCOPED_ENTRY_POINTS = (
    "all", "filter", "exclude", "get", "get_or_create", "update_or_create", "count", "exists",
    "first", "last", "iterator", "values", "values_list", "aggregate", "annotate", "alias",
    "order_by", "in_bulk", "update", "delete", "select_related", "prefetch_related", "only",
    "defer", "distinct", "latest", "earliest", "bulk_update", "raw", "select_for_update", "visible_to",
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
