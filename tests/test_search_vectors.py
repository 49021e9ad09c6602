"""The exact vector scan (a tenant below SEARCH_EXACT_MAX_CHUNKS) gives the answer of measuring every chunk in
scope: it measures the tenant's chunks first and applies the scope to the nearest of them, and when a narrow
filter leaves too few of those, measures every chunk in scope. Checked against a brute-force ranking computed
here from the stored vectors; mallory holds a copy of every message, and none of hers is ever among alice's.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from django.utils import timezone
from pgvector import HalfVector
from pytest_django import Settings

from apps.mail.importing import import_mail
from apps.mail.models import MailAccount, Message
from apps.search import queries
from apps.search.embedders import current_embedder
from apps.search.indexing import enrich_pending
from apps.search.models import Chunk, EmbeddingModel
from tests.conftest import Person
from tests.mailfactory import BASE_DATE, raw_message, write_mbox

TOPICS = [
    "The invoice for March is attached; payment is due within thirty days.",
    "Your parcel was dispatched and the courier brings it on Thursday.",
    "The production database went down overnight and was restored from backup.",
    "My flight to Lisbon lands at nine and the hotel is booked for three nights.",
    "Grandma turns eighty and we are planning a surprise party on Sunday.",
    "The lease ends in June and the landlord proposes a renewal at the same rent.",
]
SENDERS = ["Ann <ann@one.test>", "Bruno <bruno@two.test>", "Chloe <chloe@three.test>", "Rare <rare@four.test>"]


def load(p: Person, tmp: Path, prefix: str) -> None:
    messages = []
    for i in range(36):
        # Rare writes three of them: the narrow filter
        sender = SENDERS[3] if i in (5, 17, 29) else SENDERS[i % 3]
        body = f"{TOPICS[i % len(TOPICS)]} Note {i}: {TOPICS[(i * 5 + 1) % len(TOPICS)]}\n"
        messages.append(
            raw_message(
                subject=f"Message {i}",
                body=body,
                sender=sender,
                message_id=f"<{prefix}-{i}@example.test>",
                date=BASE_DATE + timedelta(hours=i),
            )
        )
    path = write_mbox(tmp / f"{prefix}.mbox", messages)
    import_mail(tenant=p.tenant, workspace=p.workspace, account_name="Personal", path=path)


def brute_force(p: Person, text: str, limit: int, sender: str | None = None) -> list[tuple[str, float]]:
    """The `limit` messages nearest to text: every chunk of the tenant in scope measured, a message's nearest
    chunk standing for it; none of negative similarity (the floor, set to 0 here, leaves those out)."""
    model = EmbeddingModel.objects.get(key=current_embedder().key)
    query = current_embedder().embed([text])[0].astype(np.float16).astype(np.float64)
    chunks = Chunk.objects.for_tenant(p.tenant).filter(model=model)
    if sender is not None:
        chunks = chunks.filter(message__sender_address__icontains=sender)
    best: dict[str, float] = {}
    for message_id, embedding in chunks.values_list("message_id", "embedding"):
        vector = np.asarray(embedding.to_list() if isinstance(embedding, HalfVector) else embedding, dtype=np.float64)
        distance = 1 - float(vector @ query / (np.linalg.norm(vector) * np.linalg.norm(query)))
        best[str(message_id)] = min(distance, best.get(str(message_id), 2.0))
    return sorted(((m, d) for m, d in best.items() if d <= 1), key=lambda item: item[1])[:limit]


def semantic(p: Person, text: str, limit: int, sender: str | None = None) -> list[tuple[str, float]]:
    scope = queries.Scope(
        tenant=p.tenant,
        accounts=MailAccount.objects.for_tenant(p.tenant),
        snapshot=timezone.now(),
        sender=sender,
    )
    ranked, complete = queries.semantic(scope, text, limit)
    assert complete
    return [(str(hit.message_id), 1 - hit.score) for hit in ranked]


def assert_same_ranking(got: list[tuple[str, float]], expected: list[tuple[str, float]]) -> None:
    """The same distances rank by rank, and each message found at its own distance (vectors are half floats,
    so two messages within 0.001 of each other may swap)."""
    assert len(got) == len(expected)
    truth = dict(expected)
    for (message_id, distance), (_, expected_distance) in zip(got, expected, strict=True):
        assert abs(distance - expected_distance) < 1e-3
        assert message_id in truth or abs(distance - expected[-1][1]) < 1e-3
        if message_id in truth:
            assert abs(truth[message_id] - distance) < 1e-3


@pytest.mark.parametrize("text", ["when is the bill due", "a package on its way", "the server crashed"])
def test_the_exact_scan_ranks_as_measuring_every_chunk_in_scope(
    alice: Person, mallory: Person, settings: Settings, tmp_path: Path, text: str
) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "SEARCH_SEMANTIC_MIN_SIMILARITY": 0}
    load(alice, tmp_path, "alice")
    load(mallory, tmp_path, "mallory")
    enrich_pending()
    mine = {str(pk) for pk in Message.objects.for_tenant(alice.tenant).values_list("pk", flat=True)}

    # 4 wanted: the tenant's 12 nearest chunks (of 36) are measured first, and hold the answer
    got = semantic(alice, text, 4)
    assert {message_id for message_id, _ in got} <= mine
    assert_same_ranking(got, brute_force(alice, text, 4))

    # three messages from Rare: the nearest chunks of the tenant hold too few of them, every one in scope is measured
    got = semantic(alice, text, 4, sender="rare@")
    assert len(got) == 3 and {message_id for message_id, _ in got} <= mine
    assert_same_ranking(got, brute_force(alice, text, 4, sender="rare@"))

    # more wanted than the tenant holds: all of its messages (similar at all), nearest first
    got, expected = semantic(alice, text, 50), brute_force(alice, text, 50)
    assert len(expected) > 12 and {message_id for message_id, _ in got} == {m for m, _ in expected} <= mine
    assert_same_ranking(got, expected)
