"""Search: keyword and vector search over the caller's mail, fused into one ranking (SPEC §16); its index."""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass, fields
from datetime import date, datetime, time
from typing import Any, Literal, NamedTuple

from pydantic import ConfigDict, Field

from apps.core.bounds import bounds
from apps.core.errors import OakenError
from apps.core.pages import encode_cursor, read_cursor
from apps.mail.reads import summaries
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Empty, Id, MailText, MessageSummary, Page, TimeZone
from apps.operations.registry import Bound, Ceiling, OpClass, operation
from apps.operations.targets import FOLDER_NEEDS_ACCOUNT, Listing, listing, reach
from apps.search import queries
from apps.search.embedders import current_embedder
from apps.search.models import SavedView
from apps.search.saved import access_view_by_id, named_uuid
from apps.search.services import rebuild_index

Mode = Literal["hybrid", "keyword", "semantic"]


class SearchFilters(Closed):
    """The filters of a search, as a saved view keeps them too (apps.operations.defs.views)."""

    model_config = FOLDER_NEEDS_ACCOUNT
    mode: Mode = Field(
        default="hybrid", description="hybrid (both, fused), keyword (words only), semantic (meaning only)"
    )
    account_id: Id | None = None
    folder: str | None = Field(
        default=None, max_length=500, description="inbox, archive, … or a folder name; needs account_id"
    )
    label_id: Id | None = None
    from_: str | None = Field(
        default=None, alias="from", min_length=1, max_length=320, description="part of the sender's address or name"
    )
    to: str | None = Field(
        default=None, min_length=1, max_length=320, description="part of a recipient's address or name"
    )
    unread: bool | None = Field(default=None, description="true: unread only; false: read only")
    has_attachment: bool | None = None
    after: date | None = Field(default=None, description="mail dated on or after this day (in tz)")
    before: date | None = Field(default=None, description="mail dated before this day (in tz)")
    tz: TimeZone = Field(default="UTC", description="the IANA time zone the days are in, e.g. Europe/Paris")


def folder_needs_account() -> Any:
    return {"anyOf": FOLDER_NEEDS_ACCOUNT["json_schema_extra"]["anyOf"]}  # type: ignore[index]


def _given(name: str) -> Any:
    return {"required": [name], "properties": {name: {"type": "string"}}}


def view_alone(*filters: str) -> Any:
    """The JSON Schema of "view_id goes with none of these", as one anyOf."""
    return [
        {"not": {"required": ["view_id"]}},
        {"not": {"anyOf": [{"required": [name]} for name in filters]}},
    ]


class SearchIn(Page, SearchFilters):
    # words or a view, and a view without filters of the call's own; a folder needs its account
    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                folder_needs_account(),
                {"anyOf": [_given("query"), _given("view_id")]},
                {"anyOf": view_alone("query", *SearchFilters.model_json_schema(by_alias=True)["properties"])},
            ]
        }
    )
    query: str | None = Field(
        default=None,
        min_length=1,
        description='words or a question; "quoted phrases", -excluded words (needed unless view_id names a view)',
    )
    view_id: Id | None = Field(
        default=None,
        description="search with a saved view's query and filters (list_views); the call then gives none of its "
        "own, only limit and cursor",
    )


class SearchHit(Closed):
    message: MessageSummary
    score: float = Field(
        description="hybrid: the fused reciprocal-rank score; keyword: text rank; semantic: cosine similarity"
    )
    matched: list[Literal["keyword", "semantic"]]
    highlight: MailText = Field(description="where the words matched, marked «like this»; else the start of the text")


class SearchOut(Closed):
    hits: list[SearchHit]
    next_cursor: str | None
    index_complete: bool = Field(description="false while some mail in scope still waits to be indexed by meaning")


@dataclass(frozen=True)
class Filters:
    """What a search or a listing looks for: the call's own input, or a saved view's."""

    query: str | None
    mode: Mode
    account_id: str | None
    folder: str | None
    label_id: str | None
    from_: str | None
    to: str | None
    unread: bool | None
    has_attachment: bool | None
    after: date | None
    before: date | None
    tz: str

    def after_at(self) -> datetime | None:
        return _day_start(self.after, self.tz)

    def before_at(self) -> datetime | None:
        return _day_start(self.before, self.tz)


# the input fields a saved view stands for: a call that names view_id gives none of them
VIEW_FIELDS = tuple(f.name for f in fields(Filters))


def view_filters(view: SavedView) -> Filters:
    return Filters(
        query=view.query or None,
        mode=view.mode,  # type: ignore[arg-type]
        account_id=named_uuid(view.account_id),
        folder=view.folder or None,
        label_id=named_uuid(view.label_id),
        from_=view.sender or None,
        to=view.recipient or None,
        unread=view.unread,
        has_attachment=view.has_attachment,
        after=view.after,
        before=view.before,
        tz=view.tz,
    )


def the_view(ctx: Context, view_id: str, data: Closed, own: tuple[str, ...]) -> SavedView:
    """The caller's own saved view (anyone else's is NOT_FOUND), refusing a call that gives `own` filters too: a
    view stands for its filters whole, none is combined with or overrides what it saved."""
    given = sorted(name for name in own if name in data.model_fields_set)
    if given:
        name = "from" if given[0] == "from_" else given[0]
        raise OakenError.invalid(name, "a call with view_id takes the view's filters: give only limit and cursor")
    if ctx.caller.user is None:
        raise OakenError.not_found("view_id")
    return access_view_by_id(view_id, tenant=ctx.tenant, user=ctx.caller.user)


class Searched(NamedTuple):
    named: Listing
    filters: Filters


def _search_targets(ctx: Context, data: SearchIn) -> Searched:
    if data.view_id is None:
        if data.query is None:
            raise OakenError.invalid("query", "give the words to search for, or view_id")
        own = Filters(**{name: getattr(data, name) for name in VIEW_FIELDS})
        return Searched(listing(ctx, data), own)
    found = view_filters(the_view(ctx, data.view_id, data, VIEW_FIELDS))
    if found.query is None:
        raise OakenError.invalid(
            "view_id", "this view has no words to search for: list its messages with list_messages and view_id"
        )
    return Searched(listing(ctx, found), found)


def _position(offset: object, snapshot: object) -> tuple[int, datetime]:
    """A search's cursor: how many hits came before, and when its first page was asked for."""
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0 or not isinstance(snapshot, str):
        raise ValueError("not a position")
    taken = datetime.fromisoformat(snapshot)
    if taken.tzinfo is None:
        raise ValueError("not a position")
    return offset, taken


def _day_start(day: date | None, zone: str) -> datetime | None:
    return datetime.combine(day, time.min, tzinfo=zoneinfo.ZoneInfo(zone)) if day is not None else None


def search_scope(ctx: Context, found: Listing, asked: Filters, snapshot: datetime) -> queries.Scope:
    """The messages a search (or a view's count) looks at: the caller's reach, what it named, its filters."""
    accounts = reach(ctx).accounts()
    if found.account is not None:
        accounts = accounts.filter(pk=found.account)
    return queries.Scope(
        tenant=ctx.tenant,
        accounts=accounts,
        snapshot=snapshot,
        folder=found.folder,
        label=found.label,
        sender=asked.from_,
        recipient=asked.to,
        unread=asked.unread,
        has_attachment=asked.has_attachment,
        after=asked.after_at(),
        before=asked.before_at(),
    )


@operation(
    name="search",
    summary="Find mail by words and by meaning, one ranked page: hybrid by default, keyword or semantic on request.",
    input=SearchIn,
    output=SearchOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    targets=_search_targets,
    bounds=(Bound("limit", "PAGE_SIZE_MAX"), Bound("query", "QUERY_MAX_CHARS")),
    returns_mail=True,
)
def search(ctx: Context, data: SearchIn) -> SearchOut:
    size = data.size(ctx.bounds)
    offset, snapshot = read_cursor(data.cursor or None, 2, _position) or (0, ctx.now)
    found, asked = ctx.targets
    assert asked.query is not None
    scope = search_scope(ctx, found, asked, snapshot)
    mode, text = asked.mode, asked.query
    deepest = bounds.SEARCH_MAX_RESULTS
    wanted = min(max(bounds.SEARCH_CANDIDATES, offset + size + 1), deepest)
    complete = True
    ranking: list[queries.Fused] = []
    if offset < deepest:
        words = queries.keyword(scope, text, wanted) if mode != "semantic" else []
        meaning: list[queries.Ranked] = []
        if mode != "keyword":
            meaning, complete = queries.semantic(scope, text, wanted)
        if mode == "hybrid":
            ranking = queries.fuse(
                [
                    ("keyword", words, bounds.SEARCH_KEYWORD_WEIGHT / 100),
                    ("semantic", meaning, bounds.SEARCH_SEMANTIC_WEIGHT / 100),
                ],
                bounds.SEARCH_RRF_K,
            )
        else:
            ranking = queries.single(mode, words or meaning)
    page = ranking[offset : offset + size]
    more = len(ranking) > offset + size and offset + size < deepest
    # the page's messages with their labels and highlights: one statement
    matched = [h.message_id for h in page if "keyword" in h.matched]
    rows = summaries(
        reach(ctx),
        {"ids": [hit.message_id for hit in page]},
        order="none",
        extra={"headline": queries.highlight_column(text, matched)},
    )
    messages = {row["id"]: row for row in rows}
    hits = []
    for hit in page:
        message = messages.get(str(hit.message_id))
        if message is None:
            continue  # deleted since it was ranked
        headline = message.pop("headline")
        hits.append(
            SearchHit(
                message=MessageSummary.model_validate(message),
                score=round(hit.score, 6),
                matched=hit.matched,  # type: ignore[arg-type]
                highlight=headline or message["snippet"],
            )
        )
    next_cursor = encode_cursor([offset + size, snapshot.isoformat()]) if more else None
    return SearchOut(hits=hits, next_cursor=next_cursor, index_complete=complete)


# ---------------------------------------------------------------- rebuild_search_index


class RebuildOut(Closed):
    queued: int = Field(description="messages embedded by another model than the current one, now waiting")
    model: str


@operation(
    name="rebuild_search_index",
    summary="Re-embed this tenant's mail with the current embeddings model (after the model setting changed).",
    input=Empty,
    output=RebuildOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
)
def rebuild_search_index(ctx: Context, data: Empty) -> RebuildOut:
    queued = rebuild_index(tenant=ctx.tenant)
    return RebuildOut(queued=queued, model=current_embedder().key)
