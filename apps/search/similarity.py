"""How near in meaning given messages are to a short text: the rules' "about" condition (apps.rules), scored with
the chunks the enricher made, by every model the tenant's chunks use (two while it is re-embedded)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from django.db.models import Max
from pgvector import HalfVector
from pgvector.django import CosineDistance

from apps.search.embedders import EmbeddingsUnavailable, embedder_for
from apps.search.models import Chunk, EmbeddingState
from apps.search.queries import meaning_state
from apps.workspaces.models import Tenant


def embedded(tenant: Tenant, message_ids: Sequence[Any]) -> set[Any]:
    """Which of these messages the enricher has embedded (the others wait for it)."""
    rows = EmbeddingState.objects.for_tenant(tenant).filter(message_id__in=message_ids, model__isnull=False)
    return set(rows.values_list("message_id", flat=True))


@lru_cache(maxsize=512)
def _vector(model_key: str, text: str) -> HalfVector | None:
    """A description's embedding by a model (the same few descriptions are scored every batch)."""
    embedder = embedder_for(model_key)
    if embedder is None:
        return None
    try:
        return HalfVector([float(x) for x in embedder.embed([text], query=True)[0]])
    except EmbeddingsUnavailable:
        _vector.cache_clear()  # nothing failed is kept: the next batch asks again
        return None


def nearness(tenant: Tenant, message_ids: Sequence[Any], texts: Sequence[str]) -> dict[str, dict[Any, float]]:
    """For each text, each embedded message's cosine similarity to it: its nearest chunk's, by the best model that
    embedded it; a message with no chunks (not embedded, or no text) is absent. One pass over the messages' chunks
    a model, however many texts."""
    found: dict[str, dict[Any, float]] = {text: {} for text in texts}
    if not message_ids or not texts:
        return found
    in_use, _ = meaning_state(tenant)
    for entry in in_use:
        vectors = {text: v for text in texts if (v := _vector(entry.model.key, text)) is not None}
        if not vectors:
            continue
        names = {f"near_{i}": text for i, text in enumerate(vectors)}
        rows = (
            Chunk.objects.for_tenant(tenant)
            .filter(model=entry.model, message_id__in=message_ids)
            .values("message_id")
            .annotate(**{name: Max(1 - CosineDistance("embedding", vectors[text])) for name, text in names.items()})
        )
        for row in rows:
            for name, text in names.items():
                scores = found[text]
                scores[row["message_id"]] = max(scores.get(row["message_id"], -1.0), float(row[name]))
    return found
