"""The labelled mail set behind the search benches: its promises hold, and it imports as real mail."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import search_corpus
from bench.search_corpus import build, shared_words, strip_quotes_and_signature
from tests.conftest import Person


def test_the_same_seed_gives_the_same_mail() -> None:
    first, again = build.__wrapped__(), build.__wrapped__()
    assert [search_corpus.raw_message(m) for m in first.mails] == [search_corpus.raw_message(m) for m in again.mails]
    assert first.queries == again.queries
    other = build.__wrapped__(seed=16)
    assert [m.key for m in other.mails] != [m.key for m in first.mails]


def test_size_and_sets() -> None:
    corpus = build()
    assert 500 <= len(corpus.mails) <= 700
    assert len({m.message_id for m in corpus.mails}) == len(corpus.mails)
    assert {m.lang for m in corpus.mails} == {"en", "fr", "de", "es"}
    sizes = {name: len(queries) for name, queries in corpus.queries.items()}
    assert sizes["paraphrased"] >= 40 and sizes["identifier"] >= 25 and sizes["distractor"] >= 12
    for queries in corpus.queries.values():
        for q in queries:
            assert q.relevant and q.relevant <= corpus.by_key.keys() and not (q.relevant & q.neutral)


def test_word_check_sees_shared_words_and_stems() -> None:
    assert shared_words("power bill", "Your billing statement") == {"bill"}
    assert shared_words("flight got cancelled", "Your Flights were cancelled") == {"flight", "cancelled"}
    assert shared_words("Électricité", "electricite") == {"electricite"}
    assert shared_words("bill for last month", "Invoice: payment due") == set()


def test_paraphrased_targets_share_no_word_with_their_query() -> None:
    corpus = build()
    for q in corpus.queries["paraphrased"]:
        for key in q.relevant:
            assert shared_words(q.text, corpus.by_key[key].full_text()) == set(), q.text


def test_each_identifier_is_in_exactly_one_message_and_near_misses_exist() -> None:
    corpus = build()
    texts = {m.key: m.full_text() for m in corpus.mails}
    tokens = {key: set(re.findall(r"[\w-]+", text.upper())) for key, text in texts.items()}
    for q in corpus.queries["identifier"]:
        exact = re.compile(r"(?<![\w-])" + re.escape(q.text) + r"(?![\w-])", re.IGNORECASE)
        assert {key for key, text in texts.items() if exact.search(text)} == set(q.relevant), q.text
        near = {key for key, found in tokens.items() if any(0 < _distance(q.text.upper(), t) <= 2 for t in found)}
        assert near - q.relevant, f"no near miss of {q.text}"
    only_attached = [
        q for q in corpus.queries["identifier"] if q.text not in corpus.by_key[next(iter(q.relevant))].body
    ]
    assert len(only_attached) >= 3


def _distance(a: str, b: str) -> int:
    """Levenshtein distance (a swap of two digits is 2)."""
    if abs(len(a) - len(b)) > 2:
        return 3
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (ca != cb))
    return row[-1]


def test_distractors_hold_the_query_words_in_another_sense() -> None:
    corpus = build()
    for q in corpus.queries["distractor"]:
        lookalikes = [m for m in corpus.mails if m.key.startswith("other-") and shared_words(q.text, m.full_text())]
        assert len(lookalikes) >= 2, q.text


def test_quotes_and_signatures_are_stripped() -> None:
    corpus = build()
    acks = [m for m in corpus.mails if m.key.startswith("ack-")]
    assert acks
    for ack in acks:
        own = strip_quotes_and_signature(ack.body)
        assert ">" not in own and "wrote" not in own and len(own) < 30
    signed = next(m for m in corpus.mails if "\n-- \n" in m.body)
    assert "Northwind Analytics" not in strip_quotes_and_signature(signed.body)


def test_the_set_imports_as_mail_and_labels_map_to_stored_messages(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    from apps.mail.importing import import_mail
    from apps.mail.models import Attachment, Message

    corpus = build()
    path = search_corpus.write_mbox(tmp_path / "corpus.mbox", corpus)
    for person in (alice, mallory):
        counts = import_mail(tenant=person.tenant, workspace=person.workspace, account_name="corpus", path=path)
        assert counts.imported == len(corpus.mails) and counts.failed == 0
    stored = dict(Message.objects.for_tenant(alice.tenant).values_list("message_id", "subject"))
    assert len(stored) == len(corpus.mails)
    for mail in corpus.mails:
        assert stored[mail.message_id] == mail.subject
    attached = {m.key for m in corpus.mails if m.attachment is not None}
    texts = Attachment.objects.for_tenant(alice.tenant).filter(message__message_id__endswith=search_corpus.DOMAIN)
    assert texts.count() == len(attached)
    code = next(q for q in corpus.queries["identifier"] if q.text == "INV-20417")
    holder = corpus.by_key[next(iter(code.relevant))]
    assert code.text not in holder.body
    assert texts.get(message__message_id=holder.message_id).extracted_text.count("INV-20417") == 1
    # the copy in the other tenant is its own
    assert Message.objects.for_tenant(mallory.tenant).filter(message_id=holder.message_id).count() == 1
    assert not Message.objects.for_tenant(alice.tenant).filter(tenant=mallory.tenant).exists()


@pytest.mark.parametrize("lang", ["fr", "de", "es"])
def test_accented_mail_round_trips(lang: str) -> None:
    from email import message_from_bytes, policy

    corpus = build()
    mail = next(m for m in corpus.mails if m.lang == lang and any(ord(c) > 127 for c in m.body))
    parsed = message_from_bytes(search_corpus.raw_message(mail), policy=policy.default)
    part = parsed.get_body(("plain",))
    assert part is not None and part.get_content() == mail.body
