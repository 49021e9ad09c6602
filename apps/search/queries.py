"""The two sides of a search and their fusion: words (the stored documents' GIN index) and meaning (chunks).

Both sides take the same scope (the caller's reach and filters, as conditions on the message) and the same
snapshot: mail stored or changed after a search's first page is left out of its later pages, so a page's
position (its offset in the fused ranking) does not drift when mail arrives.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db import connection
from django.db.models import Exists, F, Func, OuterRef, Q, QuerySet, TextField, Value

from apps.core.bounds import bounds
from apps.mail.models import MailAccount
from apps.search.embedders import EmbeddingsUnavailable, embedder_for
from apps.search.models import Chunk, EmbeddingModel, SearchDocument
from apps.search.vectors import index_name, nearest
from apps.workspaces.models import Tenant

# how the snippet marks the words that matched
MARK_START, MARK_STOP = "«", "»"
_HEADLINE_CHARS = 20_000


@dataclass(frozen=True)
class Scope:
    """Which of a tenant's messages a search looks at: the caller's reach, the filters, and the snapshot."""

    tenant: Tenant
    accounts: QuerySet[MailAccount]
    snapshot: datetime
    folder: uuid.UUID | None = None
    label: uuid.UUID | None = None
    sender: str | None = None
    recipient: str | None = None
    unread: bool | None = None
    has_attachment: bool | None = None
    after: datetime | None = None
    before: datetime | None = None

    def on_message(self, path: str) -> Q:
        """The scope as a condition on the message reached by `path` ("" for Message itself)."""
        p = f"{path}__" if path else ""
        where = Q(**{f"{p}account__in": self.accounts})
        if self.folder is not None:
            where &= Q(**{f"{p}folder_id": self.folder})
        if self.label is not None:
            where &= Q(**{f"{p}labels__id": self.label})
        if self.sender:
            where &= Q(**{f"{p}sender_address__icontains": self.sender}) | Q(
                **{f"{p}sender_name__icontains": self.sender}
            )
        if self.recipient:
            where &= Q(**{f"{p}to_addresses__icontains": self.recipient}) | Q(
                **{f"{p}cc_addresses__icontains": self.recipient}
            )
        if self.unread is not None:
            where &= Q(**{f"{p}read": not self.unread})
        if self.has_attachment is not None:
            where &= Q(**{f"{p}has_attachments": self.has_attachment})
        if self.after is not None:
            where &= Q(**{f"{p}date__gte": self.after})
        if self.before is not None:
            where &= Q(**{f"{p}date__lt": self.before})
        return where


class FoldedQuery(SearchQuery):
    """Web-search syntax ("quoted phrases", -excluded, or), folded as the documents are (oaken_fold)."""

    def __init__(self, text: str) -> None:
        super().__init__(
            Func(Value(text), function="oaken_fold", output_field=TextField()), search_type="websearch", config="simple"
        )


@dataclass(frozen=True)
class Ranked:
    message_id: Any
    score: float


def keyword(scope: Scope, text: str, limit: int) -> list[Ranked]:
    """Messages whose document matches the query, best first (cover density: words near each other count)."""
    query = FoldedQuery(text)
    rows = (
        SearchDocument.objects.for_tenant(scope.tenant)
        .filter(scope.on_message("message"), changed_at__lte=scope.snapshot, document=query)
        .annotate(rank=SearchRank(F("document"), query, cover_density=True))
        .order_by("-rank", F("message__date").desc(nulls_last=True), "message_id")
        .values_list("message_id", "rank")[:limit]
    )
    return [Ranked(pk, float(rank)) for pk, rank in rows]


@dataclass(frozen=True)
class InUse:
    model: EmbeddingModel
    indexed: bool  # the tenant has its HNSW index for the model (apps.search.vectors)


def meaning_state(tenant: Tenant) -> tuple[list[InUse], bool]:
    """The models whose chunks this tenant holds, oldest first (two while it is re-embedded), whether each has
    the tenant's HNSW index, and whether any of its mail waits for the enricher: one statement (they were
    three, and the models' EXISTS, planned as a semi-join over all the tenant's chunks, took 3 ms at 100,000)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT EXISTS (SELECT 1 FROM search_embeddingstate s WHERE s.tenant_id = %(tenant)s AND s.model_id IS NULL),
                m.id, m.key, m.dimensions, m.created_at, coalesce(i.indisvalid, false)
            FROM (SELECT 1) one
            LEFT JOIN search_embeddingmodel m ON (
                SELECT 1 FROM search_chunk c WHERE c.tenant_id = %(tenant)s AND c.model_id = m.id LIMIT 1
            ) IS NOT NULL
            LEFT JOIN pg_index i ON i.indexrelid = to_regclass(concat(%(prefix)s::text, m.id))
            ORDER BY m.created_at, m.id
            """,
            {"tenant": tenant.pk, "prefix": index_name(tenant.pk, None)},
        )
        rows = cursor.fetchall()
    waits = bool(rows[0][0])
    models = [
        InUse(EmbeddingModel(id=pk, key=key, dimensions=dimensions, created_at=created), bool(indexed))
        for _, pk, key, dimensions, created, indexed in rows
        if pk is not None
    ]
    return models, waits


def semantic(scope: Scope, text: str, limit: int) -> tuple[list[Ranked], bool]:
    """Messages nearest in meaning, nearest first, with whether the index is complete: no mail in the tenant
    waits for the enricher, and every model in use could embed the query.

    Scores are cosine similarities; hits under SEARCH_SEMANTIC_MIN_SIMILARITY are no match. While a tenant
    is re-embedded after a model change, the old model's chunks stay until every message has new ones
    (apps.search.indexing), so the old model still ranks all the mail it knows, as before the change; the
    new model ranks only what the old one never saw (mail that arrived since), merged by similarity."""
    floor = bounds.SEARCH_SEMANTIC_MIN_SIMILARITY / 100
    merged: list[Ranked] = []
    in_use, waits = meaning_state(scope.tenant)
    complete = not waits
    earlier: list[EmbeddingModel] = []
    for entry in in_use:
        model = entry.model
        embedder = embedder_for(model.key)
        if embedder is None:
            complete = False
            continue
        try:
            vector = embedder.embed([text], query=True)[0]
        except EmbeddingsUnavailable:
            complete = False
            continue
        chunks = Chunk.objects.for_tenant(scope.tenant).filter(
            scope.on_message("message"), message__search_document__changed_at__lte=scope.snapshot
        )
        if earlier:
            chunks = chunks.exclude(
                Exists(
                    Chunk.objects.for_tenant(scope.tenant).filter(model__in=earlier, message_id=OuterRef("message_id"))
                )
            )
        found = nearest(
            tenant=scope.tenant, model=model, indexed=entry.indexed, vector=vector, chunks=chunks, limit=limit
        )
        merged += [Ranked(n.message_id, 1 - n.distance) for n in found if 1 - n.distance >= floor]
        earlier.append(model)
    merged.sort(key=lambda hit: (-hit.score, str(hit.message_id)))
    return merged[:limit], complete


@dataclass
class Fused:
    message_id: Any
    score: float
    matched: list[str] = field(default_factory=list)
    keyword_rank: int | None = None


def fuse(sides: Sequence[tuple[str, list[Ranked], float]], k: int) -> list[Fused]:
    """Reciprocal-rank fusion: each side adds weight / (k + rank); ties go to the keyword side's order, then id."""
    fused: dict[Any, Fused] = {}
    for name, ranked, weight in sides:
        for rank, hit in enumerate(ranked, start=1):
            entry = fused.setdefault(hit.message_id, Fused(hit.message_id, 0.0))
            entry.score += weight / (k + rank)
            entry.matched.append(name)
            if name == "keyword":
                entry.keyword_rank = rank
    return sorted(
        fused.values(),
        key=lambda f: (-f.score, f.keyword_rank if f.keyword_rank is not None else 1 << 30, str(f.message_id)),
    )


def single(name: str, ranked: list[Ranked]) -> list[Fused]:
    """One side's own order and score (mode keyword or semantic)."""
    return [
        Fused(hit.message_id, hit.score, [name], rank if name == "keyword" else None)
        for rank, hit in enumerate(ranked, 1)
    ]


# how a headline marks what matched (ts_headline's options): two fragments of 8 to 24 words
_HEADLINE_OPTIONS = (
    f"StartSel='{MARK_START}', StopSel='{MARK_STOP}', MaxWords=24, MinWords=8, MaxFragments=2, FragmentDelimiter=' … '"
)


def highlight_column(text: str, message_ids: list[Any]) -> tuple[str, dict[str, Any]]:
    """For messages that matched by words (`message_ids`): the best fragments of their text, matched words
    marked; for the others, null. A column over the message `m` of another statement, and its parameters (named
    apart from the statement's own), so the page's messages bring their snippets along."""
    sql = """CASE WHEN m.id = ANY(%(headline_ids)s::uuid[]) THEN ts_headline('simple'::regconfig,
       left(m.text_body, %(headline_chars)s), websearch_to_tsquery('simple'::regconfig,
       oaken_fold(%(headline_query)s::text)), %(headline_options)s::text) END"""
    return sql, {
        "headline_ids": list(message_ids),
        "headline_chars": _HEADLINE_CHARS,
        "headline_query": text,
        "headline_options": _HEADLINE_OPTIONS,
    }
