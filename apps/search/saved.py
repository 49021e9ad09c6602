"""Saved views (SavedView): one person's saved searches in one tenant, their writes, and their counts.

A view belongs to its tenant and its user: another person's view, or another tenant's, is NOT_FOUND exactly like
one that does not exist. What a view names (an account, a label, a folder) is looked up in the caller's reach
each time it is used, never when it is listed from the row alone: a view naming an account the caller no longer
reaches is OUT_OF_SCOPE when used, and its count is not given.

A count is bounded: it reads at most `cap` + 1 rows (VIEW_COUNT_MAX), so list_views costs at most VIEWS_MAX
such reads. A view with a query counts the messages its words match (what `search` finds in keyword mode); a view
searching by meaning alone has no count (every message is near something).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from apps.accounts.models import User
from apps.core.acts import Act
from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.mail.models import Message
from apps.search.models import SavedView, SearchDocument
from apps.search.queries import FoldedQuery, Scope
from apps.workspaces.models import Tenant

_NAME_TAKEN = "name: you already have a view with this name"

# the fields of a view a caller sets (create_view, update_view), with the empty value each one takes away
FIELDS: dict[str, Any] = {
    "query": "",
    "mode": "hybrid",
    "account_id": None,
    "folder": "",
    "label_id": None,
    "sender": "",
    "recipient": "",
    "unread": None,
    "has_attachment": None,
    "after": None,
    "before": None,
    "tz": "UTC",
}


def views_of(*, tenant: Tenant, user: User) -> QuerySet[SavedView]:
    return SavedView.objects.for_tenant(tenant).filter(user=user).order_by("name", "id")


def access_view_by_id(view_id: str, *, tenant: Tenant, user: User, field: str = "view_id") -> SavedView:
    """The user's own view in the tenant; anyone else's (or none) is NOT_FOUND."""
    found = views_of(tenant=tenant, user=user).filter(pk=parse_id(view_id, field)).first()
    if found is None:
        raise OakenError.not_found(field)
    return found


def view_state(view: SavedView) -> dict[str, Any]:
    """What the audit records of a view: its name and which filters it sets, never its query's words."""
    return {
        "name": view.name,
        "query": "set" if view.query else "none",
        "filters": sorted(k for k, empty in FIELDS.items() if k != "query" and getattr(view, k) != empty),
    }


def _assign(view: SavedView, values: dict[str, Any]) -> None:
    for key, value in values.items():
        if key == "name":
            view.name = value
        elif key in FIELDS:
            setattr(view, key, FIELDS[key] if value is None else value)


def _save(view: SavedView, *, fresh: bool) -> None:
    try:
        with transaction.atomic():
            view.save(force_insert=fresh)
    except IntegrityError:
        raise OakenError("CONFLICT", _NAME_TAKEN, field="name") from None


def create_view(*, act: Act, user: User, values: dict[str, Any], limit: int) -> SavedView:
    """A new view of the user; past `limit` views (VIEWS_MAX) LIMIT_EXCEEDED, a name they use CONFLICT."""
    mine = views_of(tenant=act.tenant, user=user)
    if mine.count() >= limit:
        raise OakenError("LIMIT_EXCEEDED", f"you keep at most {limit} views: delete one first", field="name")
    if mine.filter(name=values["name"]).exists():
        raise OakenError("CONFLICT", _NAME_TAKEN, field="name")
    view = SavedView(tenant=act.tenant, user=user, created_at=act.now, updated_at=act.now)
    _assign(view, values)
    _save(view, fresh=True)
    act.touch(view.pk, None, view_state(view))
    return view


def update_view(*, act: Act, view: SavedView, values: dict[str, Any]) -> SavedView:
    """Change what `values` names (a None filter takes it away); the rest stays."""
    before = view_state(view)
    if "name" in values and view.name != values["name"]:
        taken = views_of(tenant=act.tenant, user=view.user).filter(name=values["name"]).exclude(pk=view.pk)
        if taken.exists():
            raise OakenError("CONFLICT", _NAME_TAKEN, field="name")
    _assign(view, values)
    view.updated_at = act.now
    _save(view, fresh=False)
    act.touch(view.pk, before, view_state(view))
    return view


def delete_view(*, act: Act, view: SavedView) -> None:
    act.touch(view.pk, view_state(view), None)
    SavedView.objects.for_tenant(act.tenant).filter(pk=view.pk).delete()


# ---------------------------------------------------------------- counts


@dataclass(frozen=True)
class Count:
    value: int | None  # None: not counted (a search by meaning alone)
    more: bool  # at least `value` messages, and more past the cap


def count(scope: Scope, *, query: str, mode: str, cap: int) -> Count:
    """How many messages of `scope` the view holds, reading at most cap + 1 rows."""
    if query and mode == "semantic":
        return Count(None, False)
    if query:
        rows: QuerySet[Any] = SearchDocument.objects.for_tenant(scope.tenant).filter(
            scope.on_message("message"), document=FoldedQuery(query)
        )
    else:
        rows = Message.objects.for_tenant(scope.tenant).filter(scope.on_message(""))
    found = rows.values("pk")[: cap + 1].count()
    return Count(min(found, cap), found > cap)


def named_uuid(value: uuid.UUID | None) -> str | None:
    return str(value) if value is not None else None
