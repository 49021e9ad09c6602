"""Saved views: a person's saved searches (a query, or none, and the filters `search` takes), listed with counts.

A view belongs to its tenant and its person: an agent works with its person's views, and nobody else's view is
ever found (NOT_FOUND). What a view names is checked in the caller's reach when it is saved and each time it is
used (search and list_messages take `view_id`): an account or label the caller no longer reaches is OUT_OF_SCOPE
then, and list_views gives its count as none, with the refusal's code as its problem. A view with words is used
through search, one without through list_messages (`lists_with` says which). A call naming view_id gives no filter
of its own: the view stands for them whole (refused, never combined). Bounds: VIEWS_MAX views per person and
tenant; each count reads at most VIEW_COUNT_MAX + 1 rows.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from apps.accounts.models import User
from apps.core import words
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.operations.context import Context
from apps.operations.defs.search import Filters, Mode, SearchFilters, search_scope, view_filters
from apps.operations.defs.shapes import Closed, Id, MailText
from apps.operations.registry import ALWAYS, NEVER, Bound, Ceiling, OpClass, Preview, operation
from apps.operations.targets import listing
from apps.search import saved
from apps.search.models import SavedView

ViewName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]
_QUERY = "words or a question, as search takes them; '' (or none): a view of its filters alone"


class ViewOut(Closed):
    id: str
    name: MailText
    query: MailText = Field(description="'' for a view of its filters alone")
    mode: Mode
    account_id: str | None
    folder: str | None
    label_id: str | None
    sender: str | None = Field(description="search's from: part of the sender's address or name")
    recipient: str | None = Field(description="search's to: part of a recipient's address or name")
    unread: bool | None
    has_attachment: bool | None
    after: date | None
    before: date | None
    tz: str
    lists_with: Literal["search", "list_messages"] = Field(
        description="the operation that takes this view's view_id: search for a view with words, else list_messages"
    )
    created_at: datetime
    updated_at: datetime


class ListedView(ViewOut):
    count: int | None = Field(
        description="its messages now (capped: see count_more); none when not counted (counts false, a view by "
        "meaning alone, or one naming what you do not reach)"
    )
    count_more: bool = Field(description="there are more than count (counting stops at a setting)")
    problem: Literal["OUT_OF_SCOPE", "NOT_FOUND"] | None = Field(
        description="what using it is refused with: an account or label outside your reach, or gone"
    )


class ViewsOut(Closed):
    views: list[ListedView]


def _out(view: SavedView) -> dict[str, Any]:
    asked = view_filters(view)
    return {
        "id": str(view.pk),
        "name": view.name,
        "query": view.query,
        "mode": asked.mode,
        "account_id": asked.account_id,
        "folder": asked.folder,
        "label_id": asked.label_id,
        "sender": asked.from_,
        "recipient": asked.to,
        "unread": asked.unread,
        "has_attachment": asked.has_attachment,
        "after": asked.after,
        "before": asked.before,
        "tz": asked.tz,
        "lists_with": "search" if view.query else "list_messages",
        "created_at": view.created_at,
        "updated_at": view.updated_at,
    }


def _person(ctx: Context) -> User:
    """Whose views these are: the person calling, or the agent's person."""
    if ctx.caller.user is None:
        raise OakenError("FORBIDDEN", "views belong to a person")
    return ctx.caller.user


# ---------------------------------------------------------------- list_views


class ListViewsIn(Closed):
    counts: bool = Field(default=True, description="count each view's messages (false: faster, counts are none)")


def _listed(ctx: Context, view: SavedView, counts: bool) -> ListedView:
    row = _out(view) | {"count": None, "count_more": False, "problem": None}
    asked = view_filters(view)
    try:
        found = listing(ctx, asked)
    except OakenError as error:
        row["problem"] = "NOT_FOUND" if error.code == "NOT_FOUND" else "OUT_OF_SCOPE"
        return ListedView.model_validate(row)
    if counts:
        scope = search_scope(ctx, found, asked, ctx.now)
        counted = saved.count(scope, query=view.query, mode=view.mode, cap=ctx.bounds.VIEW_COUNT_MAX)
        row["count"], row["count_more"] = counted.value, counted.more
    return ListedView.model_validate(row)


@operation(
    name="list_views",
    summary="Your saved views (saved searches), by name, each with how many messages it holds now.",
    input=ListViewsIn,
    output=ViewsOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
)
def list_views(ctx: Context, data: ListViewsIn) -> ViewsOut:
    """Each count reads at most VIEW_COUNT_MAX + 1 rows, and a person keeps at most VIEWS_MAX views."""
    if ctx.caller.user is None:
        return ViewsOut(views=[])
    mine = saved.views_of(tenant=ctx.tenant, user=ctx.caller.user)[: ctx.bounds.VIEWS_MAX]
    return ViewsOut(views=[_listed(ctx, view, data.counts) for view in mine])


# ---------------------------------------------------------------- create_view


class CreateViewIn(SearchFilters):
    name: ViewName
    query: str = Field(default="", description=_QUERY)


def _values(data: Closed, given: set[str]) -> dict[str, Any]:
    """The view's fields from an input's (only those in `given`): search's names to the view's columns."""
    columns = {"from_": "sender", "to": "recipient"}
    values: dict[str, Any] = {}
    for name in given:
        value = getattr(data, name)
        if name in ("account_id", "label_id") and value is not None:
            value = uuid.UUID(value)  # checked in reach (a malformed id is NOT_FOUND there)
        values[columns.get(name, name)] = value
    return values


def _checked(ctx: Context, asked: Filters) -> None:
    """What a view names, in the caller's reach now (NOT_FOUND, OUT_OF_SCOPE, a folder without its account)."""
    if asked.account_id is not None or asked.label_id is not None or asked.folder is not None:
        listing(ctx, asked)


def _create_targets(ctx: Context, data: CreateViewIn) -> None:
    own = {name: getattr(data, name) for name in Filters.__dataclass_fields__}
    _checked(ctx, Filters(**own | {"query": data.query or None}))


def _create_preview(ctx: Context, data: CreateViewIn) -> Preview:
    return Preview((Change("new view", None, {"name": data.name, "query": "set" if data.query else "none"}),))


@operation(
    name="create_view",
    summary="Save a search as a view: words (or none, for a view of filters alone) and search's filters.",
    input=CreateViewIn,
    output=ViewOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_create_preview,
    confirm=NEVER,
    targets=_create_targets,
    bounds=(Bound("query", "QUERY_MAX_CHARS"),),
)
def create_view(ctx: Context, data: CreateViewIn) -> ViewOut:
    """Changes no mail; taken back with delete_view: no confirmation asked."""
    values = _values(data, set(SearchFilters.model_fields) | {"name", "query"})
    view = saved.create_view(act=ctx, user=_person(ctx), values=values, limit=ctx.bounds.VIEWS_MAX)
    return ViewOut.model_validate(_out(view))


# ---------------------------------------------------------------- update_view


_CHANGE = "left out: as it is; null: taken away"


class UpdateViewIn(SearchFilters):
    view_id: Id
    name: ViewName | None = Field(default=None, description="left out or null: as it is")
    query: str | None = Field(default=None, description=f"{_QUERY}; left out: as it is")
    mode: Mode | None = Field(default=None, description=_CHANGE)  # type: ignore[assignment]
    tz: str | None = Field(default=None, max_length=64, description=_CHANGE)  # type: ignore[assignment]


def _the_view(ctx: Context, data: UpdateViewIn | ViewIn) -> SavedView:
    return saved.access_view_by_id(data.view_id, tenant=ctx.tenant, user=_person(ctx))


def _update_values(data: UpdateViewIn) -> dict[str, Any]:
    given = set(data.model_fields_set) - {"view_id"}
    if data.name is None:
        given.discard("name")
    return _values(data, given)


def _update_targets(ctx: Context, data: UpdateViewIn) -> SavedView:
    view = _the_view(ctx, data)
    merged = SavedView(**{f.attname: getattr(view, f.attname) for f in SavedView._meta.concrete_fields})
    saved_values = _update_values(data)
    for key, value in saved_values.items():
        if key != "name":
            setattr(merged, key, saved.FIELDS[key] if value is None else value)
    _checked(ctx, view_filters(merged))
    return view


def _update_preview(ctx: Context, data: UpdateViewIn) -> Preview:
    view: SavedView = ctx.targets
    return Preview((Change(str(view.pk), saved.view_state(view), {"changed": sorted(_update_values(data))}),))


@operation(
    name="update_view",
    summary="Change a saved view: its name, words or filters (what you leave out stays as it is; null takes a "
    "filter away).",
    input=UpdateViewIn,
    output=ViewOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_update_preview,
    confirm=NEVER,
    targets=_update_targets,
    bounds=(Bound("query", "QUERY_MAX_CHARS"),),
)
def update_view(ctx: Context, data: UpdateViewIn) -> ViewOut:
    view = saved.update_view(act=ctx, view=ctx.targets, values=_update_values(data))
    return ViewOut.model_validate(_out(view))


# ---------------------------------------------------------------- delete_view


class ViewIn(Closed):
    view_id: Id


class ViewDeletedOut(Closed):
    view_id: str
    deleted: bool


def _delete_preview(ctx: Context, data: ViewIn) -> Preview:
    view: SavedView = ctx.targets
    return Preview(
        (Change(str(view.pk), saved.view_state(view), None),),
        summary=f"Delete the view {words.named(view.name)}. No message changes: only the saved search goes.",
        title="Delete this view?",
        verb="Delete view",
    )


@operation(
    name="delete_view",
    summary="Delete a saved view (no message changes). Always confirmed.",
    input=ViewIn,
    output=ViewDeletedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_delete_preview,
    confirm=ALWAYS,
    targets=_the_view,
)
def delete_view(ctx: Context, data: ViewIn) -> ViewDeletedOut:
    view: SavedView = ctx.targets
    saved.delete_view(act=ctx, view=view)
    return ViewDeletedOut(view_id=str(view.pk), deleted=True)
