"""The enricher: embeds waiting messages in batches, with the model the settings name.

A message waits when it is new or its words changed (the triggers of migrations 0002 and 0004 unset its
EmbeddingState.model), or when rebuild_search_index asked for it after a model change. A batch is one
transaction: its states are taken FOR UPDATE SKIP LOCKED (so several workers share the work and a killed one loses
nothing: its batch waits again), embedded in one call to the model, their chunks replaced, and marked as
embedded with the model. Chunks of the model before stay until a message's new ones replace them, so search
finds every message by meaning while a tenant is re-embedded.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, Exists, OuterRef, Q
from pgvector import HalfVector
from pgvector.psycopg import register_vector

from apps.core.bounds import bounds
from apps.core.ids import new_id
from apps.mail.bulk import copy_rows
from apps.mail.models import Attachment
from apps.search.chunks import chunks
from apps.search.embedders import Embedder, current_embedder
from apps.search.models import Chunk, EmbeddingModel, EmbeddingState
from apps.search.vectors import build_indexes
from apps.workspaces.models import Tenant

log = logging.getLogger("oaken.search")


def model_of(embedder: Embedder) -> EmbeddingModel:
    """The row recording this model (made the first time it embeds)."""
    model, _ = EmbeddingModel.objects.get_or_create(key=embedder.key, defaults={"dimensions": embedder.dimensions})
    return model


def texts_of(messages: list[tuple[Any, str, str]]) -> dict[Any, list[str]]:
    """The chunks to embed of each (id, subject, body), with the text of its attachments."""
    size, most = bounds.SEARCH_CHUNK_CHARS, bounds.SEARCH_CHUNKS_MAX
    attached: dict[Any, list[str]] = defaultdict(list)
    for message_id, text in (
        Attachment.objects.unscoped()
        .filter(message_id__in=[pk for pk, _, _ in messages])
        .exclude(extracted_text="")
        .values_list("message_id", "extracted_text")
    ):
        attached[message_id].append(text)
    return {
        pk: chunks(subject=subject, body=body, attachments=attached[pk], size=size, most=most)
        for pk, subject, body in messages
    }


_CHUNK_COLUMNS = ("id", "tenant_id", "message_id", "model_id", "ordinal", "embedding")


def _copy_chunks(rows: list[tuple[Any, ...]]) -> None:
    """Write chunks by binary COPY: bulk_create spelled every vector out as text (256 numbers a chunk, formatted
    here and parsed by the server), which took a third of the enricher's time; COPY sends them as bytes."""
    connection.ensure_connection()
    raw = connection.connection
    if raw.adapters.types.get("halfvec") is None:  # once per connection: psycopg learns pgvector's types
        register_vector(raw)
    copy_rows(Chunk, _CHUNK_COLUMNS, rows)


def enrich_batch(
    embedder: Embedder | None = None, *, size: int | None = None, model: EmbeddingModel | None = None
) -> int:
    """Embed one batch of waiting messages (any tenant's); returns how many (0: none waits). `model` is the
    embedder's row (model_of), when the caller has it already."""
    embedder = embedder or current_embedder()
    model = model or model_of(embedder)
    size = size or bounds.SEARCH_EMBED_BATCH
    with transaction.atomic():
        with connection.cursor() as cursor:
            # a batch lost in a crash is all lost (chunks and marks alike) and simply waits again: its commit
            # need not wait for the disk (a flush a batch was a twentieth of the enricher's time)
            cursor.execute("SET LOCAL synchronous_commit = off")
        batch = list(
            EmbeddingState.objects.unscoped()
            .filter(model__isnull=True)
            .select_for_update(skip_locked=True, of=("self",))
            .values_list("message_id", "tenant_id", "message__subject", "message__text_body")[:size]
        )
        if not batch:
            return 0
        tenant_of = {pk: tenant_id for pk, tenant_id, _, _ in batch}
        texts = texts_of([(pk, subject, body) for pk, _, subject, body in batch])
        flat = [(pk, ordinal, text) for pk, pieces in texts.items() for ordinal, text in enumerate(pieces)]
        vectors = embedder.embed([text for _, _, text in flat])
        # this model's chunks of these messages are replaced; another model's stay until the tenant is done
        Chunk.objects.unscoped().filter(message_id__in=list(tenant_of), model=model).delete()
        _copy_chunks(
            [
                (new_id(), tenant_of[pk], pk, model.pk, ordinal, HalfVector(vector))
                for (pk, ordinal, _), vector in zip(flat, vectors, strict=True)
            ]
        )
        EmbeddingState.objects.unscoped().filter(message_id__in=list(tenant_of)).update(model=model)
    return len(batch)


def drop_replaced(model: EmbeddingModel) -> int:
    """Chunks of other models, of tenants where no message waits any more: they were re-embedded."""
    others = list(EmbeddingModel.objects.exclude(pk=model.pk).values_list("pk", flat=True))
    if not others:  # the usual case: one model, nothing to look for
        return 0
    waiting = EmbeddingState.objects.unscoped().filter(model__isnull=True, tenant_id=OuterRef("tenant_id"))
    deleted, _ = (
        Chunk.objects.unscoped()
        .filter(model_id__in=others)
        .filter(~Exists(waiting), message__embedding_state__model=model)
        .delete()
    )
    return deleted


@dataclass
class Enriched:
    messages: int
    more: bool
    indexes_built: list[str]


def enrich_pending(
    *, seconds: float | None = None, limit: int | None = None, embedder: Embedder | None = None
) -> Enriched:
    """Embed batches until none waits, or for about `seconds`, or `limit` messages; then build the HNSW
    indexes of tenants that have grown past the exact scan."""
    embedder = embedder or current_embedder()
    model = model_of(embedder)
    started, done, more = time.monotonic(), 0, False
    while True:
        if limit is not None and done >= limit:
            more = True
            break
        if seconds is not None and time.monotonic() - started > seconds:
            more = True
            break
        size = bounds.SEARCH_EMBED_BATCH
        count = enrich_batch(embedder, size=min(size, limit - done) if limit is not None else size, model=model)
        done += count
        if count == 0:
            break
    if done:
        drop_replaced(model)
    built = build_indexes(model) if done else []
    return Enriched(messages=done, more=more, indexes_built=built)


def rebuild(*, tenant: Tenant) -> int:
    """Ask for this tenant's messages embedded by another model than the current one; returns how many."""
    model = model_of(current_embedder())
    return EmbeddingState.objects.for_tenant(tenant).filter(model__isnull=False).exclude(model=model).update(model=None)


@dataclass(frozen=True)
class IndexState:
    messages: int
    indexed: int
    waiting: int
    # messages whose chunks come from another model than the current one (rebuild_search_index re-embeds them)
    other_model: int
    model: str


def index_state(*, tenant: Tenant, accounts: Any = None) -> IndexState:
    """How much of this tenant's mail (or of `accounts`' mail) search holds by meaning, and what waits."""
    model = model_of(current_embedder())
    states = EmbeddingState.objects.for_tenant(tenant)
    if accounts is not None:
        states = states.filter(message__account__in=accounts)
    counts = states.aggregate(
        total=Count("pk"),
        waiting=Count("pk", filter=Q(model__isnull=True)),
        current=Count("pk", filter=Q(model=model)),
    )
    waiting = counts["waiting"]
    return IndexState(
        messages=counts["total"],
        indexed=counts["total"] - waiting,
        waiting=waiting,
        other_model=counts["total"] - waiting - counts["current"],
        model=model.key,
    )
