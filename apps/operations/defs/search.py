"""Search: keyword and vector search over the caller's mail, fused into one ranking (SPEC §16); its index."""

from __future__ import annotations

import zoneinfo
from datetime import date, datetime, time
from functools import lru_cache
from typing import Literal

from pydantic import Field, field_validator

from apps.core.bounds import bounds
from apps.core.pages import encode_cursor, read_cursor
from apps.mail.reads import summaries
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Empty, Id, MailText, MessageSummary, Page
from apps.operations.registry import Bound, Ceiling, OpClass, operation
from apps.operations.targets import FOLDER_NEEDS_ACCOUNT, Listing, listing, reach
from apps.search import queries
from apps.search.embedders import current_embedder
from apps.search.services import rebuild_index

Mode = Literal["hybrid", "keyword", "semantic"]


@lru_cache(maxsize=1)
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


class SearchIn(Page):
    model_config = FOLDER_NEEDS_ACCOUNT
    query: str = Field(min_length=1, description='words or a question; "quoted phrases", -excluded words')
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
    tz: str = Field(default="UTC", max_length=64, description="the IANA time zone the days are in, e.g. Europe/Paris")

    @field_validator("tz")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        if value not in _zones():
            raise ValueError("is not an IANA time zone name")
        return value


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


def _search_targets(ctx: Context, data: SearchIn) -> Listing:
    return listing(ctx, data)


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


@operation(
    name="search",
    summary="Find mail by words and by meaning, one ranked page: hybrid by default, keyword or semantic on request.",
    input=SearchIn,
    output=SearchOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    targets=_search_targets,
    bounds=(Bound("limit", "PAGE_SIZE_MAX"), Bound("query", "QUERY_MAX_CHARS")),
)
def search(ctx: Context, data: SearchIn) -> SearchOut:
    size = data.size(ctx.bounds)
    offset, snapshot = read_cursor(data.cursor or None, 2, _position) or (0, ctx.now)
    found: Listing = ctx.targets
    accounts = reach(ctx).accounts()
    if found.account is not None:
        accounts = accounts.filter(pk=found.account)
    scope = queries.Scope(
        tenant=ctx.tenant,
        accounts=accounts,
        snapshot=snapshot,
        folder=found.folder,
        label=found.label,
        sender=data.from_,
        recipient=data.to,
        unread=data.unread,
        has_attachment=data.has_attachment,
        after=_day_start(data.after, data.tz),
        before=_day_start(data.before, data.tz),
    )
    deepest = bounds.SEARCH_MAX_RESULTS
    wanted = min(max(bounds.SEARCH_CANDIDATES, offset + size + 1), deepest)
    complete = True
    ranking: list[queries.Fused] = []
    if offset < deepest:
        words = queries.keyword(scope, data.query, wanted) if data.mode != "semantic" else []
        meaning: list[queries.Ranked] = []
        if data.mode != "keyword":
            meaning, complete = queries.semantic(scope, data.query, wanted)
        if data.mode == "hybrid":
            ranking = queries.fuse(
                [
                    ("keyword", words, bounds.SEARCH_KEYWORD_WEIGHT / 100),
                    ("semantic", meaning, bounds.SEARCH_SEMANTIC_WEIGHT / 100),
                ],
                bounds.SEARCH_RRF_K,
            )
        else:
            ranking = queries.single(data.mode, words or meaning)
    page = ranking[offset : offset + size]
    more = len(ranking) > offset + size and offset + size < deepest
    # the page's messages with their labels and highlights: one statement
    matched = [h.message_id for h in page if "keyword" in h.matched]
    rows = summaries(
        reach(ctx),
        {"ids": [hit.message_id for hit in page]},
        order="none",
        extra={"headline": queries.highlight_column(data.query, matched)},
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
