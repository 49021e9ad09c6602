"""Nearest chunks by cosine distance, for one tenant and one model, never reading another tenant's vectors.

A tenant with few chunks (SEARCH_EXACT_MAX_CHUNKS) is scanned exactly: its rows by the (tenant, model)
index, every distance computed. A larger tenant gets an HNSW index of its own, a partial index on
`embedding::halfvec(<dimensions>)` for its tenant id and model id, built in the background by the enricher.
One graph per tenant, not one shared by all: an approximate search walks a graph, and a shared graph would
make one tenant's results depend on what other tenants hold (their content, their volume). Filtered
queries use iterative index scans (pgvector 0.8, relaxed order, re-sorted here), and fall back to the
exact scan of the filtered rows when the index cannot fill the page.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import F, QuerySet
from django.db.models.functions import Cast
from pgvector import HalfVector
from pgvector.django import CosineDistance, HalfVectorField

from apps.core.bounds import bounds
from apps.search.models import Chunk, EmbeddingModel
from apps.workspaces.models import Tenant

log = logging.getLogger("oaken.search")


def index_name(tenant_id: Any, model: EmbeddingModel | None) -> str:
    """The name of a tenant's HNSW index for a model (without a model: the part before the model's id)."""
    return f"search_chunk_hnsw_{str(tenant_id).replace('-', '')}_{model.pk if model is not None else ''}"


def session_settings(*, sender: Any, connection: Any, **kwargs: Any) -> None:
    """How HNSW scans run, set once a connection (connection_created) rather than once a search, which cost a
    statement and a round trip a search: iterative scans (relaxed order: re-sorted here) so a filtered query
    still fills its page, and the candidate list of SEARCH_HNSW_EF_SEARCH. Only HNSW scans read them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', false), set_config('hnsw.ef_search', %s, false)",
            [str(bounds.SEARCH_HNSW_EF_SEARCH)],
        )


def has_index(tenant: Tenant, model: EmbeddingModel) -> bool:
    """Whether this tenant's HNSW index for this model exists and is ready (a concurrent build is not)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(%s)",
            [index_name(tenant.pk, model)],
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def build_indexes(model: EmbeddingModel) -> list[str]:
    """An HNSW index for every tenant past SEARCH_EXACT_MAX_CHUNKS chunks of this model that has none yet.

    CREATE INDEX CONCURRENTLY: searches and the enricher go on while it builds (it cannot run in a
    transaction; the enricher calls it between batches)."""
    threshold = bounds.SEARCH_EXACT_MAX_CHUNKS
    built = []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tenant_id FROM search_chunk WHERE model_id = %s GROUP BY tenant_id HAVING count(*) > %s",
            [model.pk, threshold],
        )
        tenants = [row[0] for row in cursor.fetchall()]
        for tenant_id in tenants:
            name = index_name(tenant_id, model)
            cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [name])
            row = cursor.fetchone()
            if row and row[0]:
                continue
            if row:  # a build that was interrupted leaves an invalid index: drop it and build again
                cursor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
            log.info("building the vector index of a tenant (%s chunks or more)", threshold)
            cursor.execute(
                f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{name}" ON search_chunk USING hnsw '
                f"((embedding::halfvec({int(model.dimensions)})) halfvec_cosine_ops) "
                # DDL takes no bound parameters (server-side binding): both values inlined, each its own type's literal
                f"WHERE tenant_id = '{uuid.UUID(str(tenant_id))}' AND model_id = {int(model.pk)}",
            )
            built.append(name)
    return built


@dataclass(frozen=True)
class Near:
    message_id: Any
    distance: float


def _by_message(rows: list[tuple[Any, float]], limit: int) -> list[Near]:
    """A message's nearest chunk stands for it; nearest first."""
    best: dict[Any, float] = {}
    for message_id, distance in rows:
        if message_id not in best or distance < best[message_id]:
            best[message_id] = distance
    return [Near(m, d) for m, d in sorted(best.items(), key=lambda item: (item[1], str(item[0])))][:limit]


def _row_counts(limit: int) -> list[int]:
    """How many chunk rows to ask for to find `limit` messages: a few more first (most messages bring one chunk
    near a query), then as many as SEARCH_CHUNKS_MAX (up to 4) a message, when the first rows fell short."""
    per_message = min(bounds.SEARCH_CHUNKS_MAX, 4)
    return sorted({min(limit + limit // 2, limit * per_message), limit * per_message})


def nearest(
    *, tenant: Tenant, model: EmbeddingModel, indexed: bool, vector: Any, chunks: QuerySet[Chunk], limit: int
) -> list[Near]:
    """The `limit` messages nearest to vector among `chunks` (this tenant's, already filtered); `indexed`: the
    tenant has its HNSW index for the model (has_index)."""
    query = HalfVector(list(map(float, vector)))
    scoped = chunks.filter(tenant=tenant, model=model)
    counts = _row_counts(limit)
    if indexed:
        # the scan's settings are the connection's (session_settings), not set a search
        cast = Cast("embedding", HalfVectorField(dimensions=model.dimensions))
        for rows_wanted in counts:
            rows = list(
                scoped.annotate(distance=CosineDistance(cast, query))
                .order_by("distance")
                .values_list("message_id", "distance")[:rows_wanted]
            )
            found = _by_message(rows, limit)
            if len(found) == limit:
                return found
            if len(rows) < rows_wanted:
                break  # the scan ended (every row in scope, or hnsw.max_scan_tuples): asking for more finds no more
    # exact: the distance on the bare column matches no index, so rows are measured one by one. First the
    # tenant's nearest chunks, measured without looking at their messages (joining every chunk to its message
    # and document for the scope cost 2-4 times the distances: 32-64 ms against 10 at 11,000 chunks), then the
    # scope applied to those; when it leaves too few (a narrow filter), every row in scope is measured.
    distance = CosineDistance(F("embedding"), query)
    candidates = (
        Chunk.objects.for_tenant(tenant)
        .filter(model=model)
        .annotate(distance=distance)
        .order_by("distance")
        .values("pk")[: counts[0] * 2]
    )
    rows = list(
        scoped.filter(pk__in=candidates)
        .annotate(distance=distance)
        .order_by("distance")
        .values_list("message_id", "distance")[: counts[0]]
    )
    found = _by_message(rows, limit)
    if len(found) == limit:
        return found
    rows = list(
        scoped.annotate(distance=distance).order_by("distance").values_list("message_id", "distance")[: counts[-1]]
    )
    return _by_message(rows, limit)
