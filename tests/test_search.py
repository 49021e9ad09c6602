"""Search by words and by meaning (SPEC §16, issue 15): the stored documents, the enricher, the fusion, the
filters, the cursor, the index state, a model change, and the per-tenant vector index.

Mallory, in another tenant, holds a copy of every one of alice's messages: none of hers ever appears in
alice's results (nor the other way round), whatever the mode.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from pytest_django import Settings

from apps.mail.importing import import_mail
from apps.mail.models import Message
from apps.search.embedders import current_embedder
from apps.search.indexing import enrich_pending, index_state
from apps.search.models import Chunk, EmbeddingModel, EmbeddingState, SearchDocument
from apps.search.vectors import has_index, index_name
from apps.workspaces.models import Workspace
from tests.callers import as_agent, as_person, call, refusal
from tests.conftest import Person
from tests.imapbox import connect, sync
from tests.mailservers import ImapServer, SmtpServer

# key -> (subject, sender, body, date, attachment text or None)
MAIL: dict[str, tuple[str, str, str, datetime, str | None]] = {
    "invoice": (
        "Invoice INV-20391 for October",
        "Billing <billing@utility.test>",
        "Your invoice is attached. Payment of 84.20 EUR is due within 30 days.",
        datetime(2026, 10, 3, 9, 0, tzinfo=UTC),
        None,
    ),
    "near-invoice": (
        "Invoice INV-20392 for September",
        "Billing <billing@utility.test>",
        "Thank you, your payment was received.",
        datetime(2026, 9, 3, 9, 0, tzinfo=UTC),
        None,
    ),
    "flight": (
        "Your flight to Lisbon",
        "Air Lines <news@airline.test>",
        "We are sorry: departure is delayed by two hours because of a storm over the airport.",
        datetime(2026, 10, 5, 23, 30, tzinfo=UTC),  # 6 October in Paris
        None,
    ),
    "dentist": (
        "Reminder: appointment tomorrow",
        "Clinic <desk@clinic.test>",
        "Dr. Moreau expects you at 9 for the check-up of your teeth and gums.",
        datetime(2026, 10, 1, 8, 0, tzinfo=UTC),
        None,
    ),
    "parcel": (
        "Shipping notice",
        "Shop <orders@shop.test>",
        "Your package left our warehouse and the courier brings it on Tuesday.",
        datetime(2026, 10, 2, 8, 0, tzinfo=UTC),
        "Tracking code 1Z999AA10123456784, carrier manifest for the wombat-shaped lamp.",
    ),
    "zurich": (
        "Réunion à Zürich",
        "Élodie Brûlé <elodie@example.test>",
        "Nous nous retrouvons au café près de la gare.\n\n-- \nÉlodie\nDirectrice",
        datetime(2026, 9, 20, 8, 0, tzinfo=UTC),
        None,
    ),
}


def raw(key: str, prefix: str) -> bytes:
    subject, sender, body, date, attached = MAIL[key]
    message = EmailMessage()
    message["From"] = sender
    message["To"] = "Alice <alice@example.test>"
    message["Subject"] = subject
    message["Date"] = format_datetime(date)
    message["Message-ID"] = f"<{prefix}-{key}@example.test>"
    message.set_content(body)
    if attached is not None:
        message.add_attachment(attached, filename="manifest.txt")
    return bytes(message)


def load(p: Person, tmp: Path, *, prefix: str, keys: list[str] | None = None) -> dict[str, str]:
    """Import the mail (all of MAIL, or `keys`) into the person's account; key -> message id."""
    from tests.mailfactory import write_mbox

    keys = keys or list(MAIL)
    path = write_mbox(tmp / f"{prefix}-{len(keys)}.mbox", [raw(key, prefix) for key in keys])
    import_mail(tenant=p.tenant, workspace=p.workspace, account_name="Personal", path=path)
    ids = dict(Message.objects.for_tenant(p.tenant).values_list("message_id", "pk"))
    return {key: str(ids[f"{prefix}-{key}@example.test"]) for key in keys if f"{prefix}-{key}@example.test" in ids}


@pytest.fixture
def boxes(alice: Person, mallory: Person, tmp_path: Path) -> dict[str, dict[str, str]]:
    """Alice's mail, and an identical copy of it in mallory's tenant."""
    return {"alice": load(alice, tmp_path, prefix="alice"), "mallory": load(mallory, tmp_path, prefix="mallory")}


def hits(output: dict[str, Any]) -> list[str]:
    return [hit["message"]["id"] for hit in output["hits"]]


def found(p: Person, query: str, **extra: Any) -> list[str]:
    return hits(call(as_person(p), "search", {"query": query, **extra}))


def keys_of(ids: list[str], box: dict[str, str]) -> list[str]:
    names = {v: k for k, v in box.items()}
    return [names.get(i, f"stranger:{i}") for i in ids]


# ---------------------------------------------------------------- words


def test_words_are_found_in_subject_people_body_and_attachments_with_accents_folded(
    alice: Person, mallory: Person, boxes: dict[str, dict[str, str]]
) -> None:
    mine = boxes["alice"]
    kw = {"mode": "keyword"}
    assert keys_of(found(alice, "INV-20391", **kw), mine) == ["invoice"]  # the identifier, not its neighbour
    assert keys_of(found(alice, "inv-20392", **kw), mine) == ["near-invoice"]
    assert keys_of(found(alice, "1Z999AA10123456784", **kw), mine) == ["parcel"]  # only in the attachment
    assert keys_of(found(alice, "wombat", **kw), mine) == ["parcel"]
    assert keys_of(found(alice, "zurich", **kw), mine) == ["zurich"]  # Zürich, unaccented
    assert keys_of(found(alice, "ZÜRICH elodie", **kw), mine) == ["zurich"]  # the sender's name counts
    assert keys_of(found(alice, "billing", **kw), mine) in (["invoice", "near-invoice"], ["near-invoice", "invoice"])
    # the subject outranks the body: "invoice" is in both subjects, but only one body says it again
    assert keys_of(found(alice, "invoice", **kw), mine)[0] == "invoice"
    # a signature is not the body's own text for meaning, but its words are still found
    assert keys_of(found(alice, "directrice", **kw), mine) == ["zurich"]
    output = call(as_person(alice), "search", {"query": "departure storm", "mode": "keyword"})
    assert output["index_complete"] is True  # the words are indexed as mail arrives
    assert "«departure»" in output["hits"][0]["highlight"] and "«storm»" in output["hits"][0]["highlight"]
    assert output["hits"][0]["matched"] == ["keyword"]
    # none of mallory's copies, and hers are hers
    assert set(found(mallory, "INV-20391", **kw)) == {boxes["mallory"]["invoice"]}
    assert not set(found(alice, "invoice", **kw)) & set(boxes["mallory"].values())


# ---------------------------------------------------------------- meaning


def test_meaning_is_found_after_the_enricher_runs_and_never_across_tenants(
    alice: Person, mallory: Person, boxes: dict[str, dict[str, str]]
) -> None:
    mine = boxes["alice"]
    before = call(as_person(alice), "search", {"query": "plane late", "mode": "semantic"})
    assert before == {"hits": [], "next_cursor": None, "index_complete": False}
    assert index_state(tenant=alice.tenant).waiting == len(MAIL)

    assert enrich_pending().messages == 2 * len(MAIL)
    state = index_state(tenant=alice.tenant)
    assert (state.messages, state.indexed, state.waiting, state.other_model) == (len(MAIL), len(MAIL), 0, 0)

    after = call(as_person(alice), "search", {"query": "plane late", "mode": "semantic"})
    assert after["index_complete"] is True
    assert keys_of(hits(after), mine)[0] == "flight"  # shares no word with the query
    assert after["hits"][0]["matched"] == ["semantic"] and 0 < after["hits"][0]["score"] <= 1
    assert keys_of(found(alice, "tooth doctor visit", mode="semantic"), mine)[0] == "dentist"
    assert keys_of(found(alice, "parcel delivery", mode="semantic"), mine)[0] == "parcel"
    # hybrid: the identifier stays first, and meaning finds what words cannot
    assert keys_of(found(alice, "INV-20391"), mine)[0] == "invoice"
    assert keys_of(found(alice, "plane late"), mine)[0] == "flight"
    both = call(as_person(alice), "search", {"query": "invoice payment"})["hits"][0]
    assert keys_of([both["message"]["id"]], mine) == ["invoice"] and set(both["matched"]) == {"keyword", "semantic"}

    for query in ("plane late", "tooth doctor visit", "invoice", "INV-20391", "wombat"):
        for mode in ("hybrid", "semantic", "keyword"):
            assert set(found(alice, query, mode=mode)) <= set(mine.values())
            assert set(found(mallory, query, mode=mode)) <= set(boxes["mallory"].values())
    # a chunk is its tenant's: alice's copy and mallory's have chunks of their own
    assert not Chunk.objects.for_tenant(alice.tenant).filter(message_id__in=list(boxes["mallory"].values())).exists()


def test_a_changed_message_waits_again_and_flags_do_not(alice: Person, boxes: dict[str, dict[str, str]]) -> None:
    enrich_pending()
    message = Message.objects.for_tenant(alice.tenant).get(pk=boxes["alice"]["dentist"])
    call(as_person(alice), "mark_read", {"message_ids": [str(message.pk)]})
    assert not EmbeddingState.objects.for_tenant(alice.tenant).filter(model__isnull=True).exists()
    Message.objects.for_tenant(alice.tenant).filter(pk=message.pk).update(subject="Cancelled: dentist")
    waiting = EmbeddingState.objects.for_tenant(alice.tenant).filter(model__isnull=True)
    assert [str(pk) for pk in waiting.values_list("message_id", flat=True)] == [str(message.pk)]
    assert found(alice, "cancelled", mode="keyword") == [str(message.pk)]
    output = call(as_person(alice), "search", {"query": "cancelled dentist"})
    assert output["index_complete"] is False
    enrich_pending()
    assert call(as_person(alice), "search", {"query": "cancelled dentist"})["index_complete"] is True


# ---------------------------------------------------------------- filters, cursor, input


def test_filters_narrow_both_sides(alice: Person, boxes: dict[str, dict[str, str]]) -> None:
    mine = boxes["alice"]
    enrich_pending()
    me = as_person(alice)
    everything = "invoice or flight or appointment or package or réunion"

    def keys(**extra: Any) -> set[str]:
        return set(keys_of(hits(call(me, "search", {"query": everything, "limit": 50, **extra})), mine))

    assert keys(**{"from": "billing@"}) == {"invoice", "near-invoice"}
    assert keys(**{"from": "élodie"}) == {"zurich"}
    assert keys(to="alice@example") >= {"invoice", "flight"}
    assert keys(to="nobody@") == set()
    assert keys(has_attachment=True) == {"parcel"}
    call(me, "mark_read", {"message_ids": [mine["flight"]]})
    assert "flight" not in keys(unread=True) and "flight" in keys(unread=False)
    # the flight left at 23:30 UTC on 5 October: the 6th in Paris
    assert "flight" in keys(after="2026-10-06", tz="Europe/Paris")
    assert "flight" not in keys(after="2026-10-06")
    assert keys(after="2026-10-02", before="2026-10-04") == {"parcel", "invoice"}
    account = call(me, "list_accounts")["accounts"][0]["id"]
    assert "zurich" in keys(account_id=account, folder="inbox")
    # a label narrows both sides, and each hit carries its labels (sorted by name)
    labels = [call(me, "create_label", {"account_id": account, "name": name})["label"]["id"] for name in ("b", "a")]
    call(me, "add_labels", {"message_ids": [mine["invoice"], mine["parcel"]], "label_ids": [labels[0]]})
    call(me, "add_labels", {"message_ids": [mine["invoice"]], "label_ids": [labels[1]]})
    assert keys(label_id=labels[0]) == {"invoice", "parcel"} and keys(label_id=labels[1]) == {"invoice"}
    for mode in ("hybrid", "keyword", "semantic"):
        shown = {
            hit["message"]["id"]: hit["message"]["label_ids"]
            for hit in call(me, "search", {"query": everything, "mode": mode, "limit": 50, "label_id": labels[0]})[
                "hits"
            ]
        }
        assert shown[mine["invoice"]] == [labels[1], labels[0]] and shown[mine["parcel"]] == [labels[0]], mode

    error = refusal(me, "search", {"query": "x", "tz": "Mars/Olympus_Mons"})
    assert (error.code, error.field) == ("INVALID_INPUT", "tz") and "Olympus" not in error.message
    error = refusal(me, "search", {"query": "x", "mode": "psychic"})
    assert (error.code, error.field) == ("INVALID_INPUT", "mode")
    error = refusal(me, "search", {"query": "x", "folder": "inbox"})
    assert (error.code, error.field) == ("INVALID_INPUT", "folder")


def test_pages_do_not_drift_when_mail_arrives(alice: Person, tmp_path: Path, boxes: dict[str, dict[str, str]]) -> None:
    me = as_person(alice)
    words = "invoice or flight or appointment or package"
    query: dict[str, Any] = {"query": words, "mode": "keyword", "limit": 2}
    first = call(me, "search", query)
    assert len(first["hits"]) == 2 and first["next_cursor"]
    # a message that would rank first arrives between the pages
    MAIL["late"] = ("Invoice flight appointment package", "X <x@x.test>", "invoice flight", datetime.now(UTC), None)
    try:
        load(alice, tmp_path, prefix="alice", keys=["late"])
    finally:
        del MAIL["late"]
    rest: list[str] = []
    cursor = first["next_cursor"]
    while cursor:
        page = call(me, "search", {**query, "cursor": cursor})
        rest += hits(page)
        cursor = page["next_cursor"]
    seen = hits(first) + rest
    mine = boxes["alice"]
    assert len(seen) == len(set(seen)) and set(keys_of(seen, mine)) == {
        "invoice",
        "near-invoice",
        "flight",
        "dentist",
        "parcel",
    }
    new = Message.objects.for_tenant(alice.tenant).get(message_id="alice-late@example.test")
    assert found(alice, words, mode="keyword")[0] == str(new.pk)  # a new search has it, first


def test_a_restricted_agent_names_an_account_in_its_reach(alice: Person, boxes: dict[str, dict[str, str]]) -> None:
    enrich_pending()
    work = Workspace.objects.create(tenant=alice.tenant, name="work")
    restricted = as_agent(alice, workspaces=("work",))
    error = refusal(restricted, "search", {"query": "invoice"})
    assert (error.code, error.field) == ("OUT_OF_SCOPE", "account_id")
    personal = call(as_person(alice), "list_accounts")["accounts"][0]["id"]
    error = refusal(restricted, "search", {"query": "invoice", "account_id": personal})
    assert (error.code, error.field) == ("OUT_OF_SCOPE", "account_id")
    assert work.pk is not None
    everywhere = as_agent(alice, workspaces=("default",))
    assert set(hits(call(everywhere, "search", {"query": "invoice", "account_id": personal}))) <= set(
        boxes["alice"].values()
    )


# ---------------------------------------------------------------- a model change


def test_a_model_change_is_re_embedded_on_rebuild_and_meaning_is_found_meanwhile(
    alice: Person, mallory: Person, settings: Settings, boxes: dict[str, dict[str, str]]
) -> None:
    mine = boxes["alice"]
    enrich_pending()
    old = EmbeddingModel.objects.get(key=current_embedder().key)
    settings.SEARCH_EMBEDDINGS = {**settings.SEARCH_EMBEDDINGS, "DIMENSIONS": 128}
    new_key = current_embedder().key
    assert new_key != old.key and current_embedder().dimensions == 128
    # nothing waits: the old vectors still serve, and status says what the rebuild would re-embed
    assert index_state(tenant=alice.tenant).other_model == len(MAIL)

    output = call(as_person(alice), "rebuild_search_index", {})
    assert output == {"queued": len(MAIL), "model": new_key}
    assert index_state(tenant=mallory.tenant).other_model == len(MAIL)  # hers are hers to rebuild

    enrich_pending(limit=3)  # part of alice's mail is re-embedded, the rest still has the old model's chunks
    used = set(Chunk.objects.for_tenant(alice.tenant).values_list("model__key", flat=True))
    assert used == {old.key, new_key}
    for query, key in (("plane late", "flight"), ("tooth doctor visit", "dentist"), ("parcel delivery", "parcel")):
        output = call(as_person(alice), "search", {"query": query, "mode": "semantic"})
        assert keys_of(hits(output), mine)[0] == key, query
        assert output["index_complete"] is False

    enrich_pending()
    assert set(Chunk.objects.for_tenant(alice.tenant).values_list("model__key", flat=True)) == {new_key}
    assert keys_of(found(alice, "plane late", mode="semantic"), mine)[0] == "flight"
    assert index_state(tenant=alice.tenant).other_model == 0

    agent_error = refusal(as_agent(alice), "rebuild_search_index", {})
    assert agent_error.code in {"NOT_AVAILABLE", "NOT_FOUND", "FORBIDDEN"}


# ---------------------------------------------------------------- a tenant's own vector index


@pytest.mark.django_db(transaction=True)
def test_a_large_tenant_gets_an_index_of_its_own_with_the_same_answers(
    alice: Person, mallory: Person, settings: Settings, tmp_path: Path
) -> None:
    mine = load(alice, tmp_path, prefix="alice")
    load(mallory, tmp_path, prefix="mallory", keys=["invoice", "flight"])
    enrich_pending()
    model = EmbeddingModel.objects.get(key=current_embedder().key)
    queries = ("plane late", "tooth doctor visit", "parcel delivery", "invoice payment", "meeting in a café")
    exact = {q: found(alice, q, mode="semantic", limit=50) for q in queries}

    settings.OPERATIONS = {**settings.OPERATIONS, "SEARCH_EXACT_MAX_CHUNKS": 3}
    Message.objects.for_tenant(alice.tenant).filter(pk=mine["dentist"]).update(subject="Reminder: the dentist")
    enrich_pending()  # something waited, so the enricher ran, and built the index of the tenant past 3 chunks
    assert has_index(alice.tenant, model) and not has_index(mallory.tenant, model)
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [index_name(alice.tenant.pk, model)])
        (definition,) = cursor.fetchone() or ("",)
    assert "hnsw" in definition and str(alice.tenant.pk) in definition
    for q in queries:
        indexed = found(alice, q, mode="semantic", limit=50)
        assert indexed[:3] == exact[q][:3], q
        assert set(indexed) <= set(mine.values())
    # a filtered search through the index still fills its page
    assert keys_of(found(alice, "mail", mode="semantic", has_attachment=True), mine) == ["parcel"]
    assert set(found(mallory, "plane late", mode="semantic")) <= {
        str(pk) for pk in Message.objects.for_tenant(mallory.tenant).values_list("pk", flat=True)
    }


def test_the_enricher_keeps_nothing_of_a_deleted_message(alice: Person, boxes: dict[str, dict[str, str]]) -> None:
    enrich_pending()
    gone = boxes["alice"]["flight"]
    Message.objects.for_tenant(alice.tenant).filter(pk=gone).delete()
    assert not Chunk.objects.for_tenant(alice.tenant).filter(message_id=gone).exists()
    assert not SearchDocument.objects.for_tenant(alice.tenant).filter(message_id=gone).exists()
    assert not EmbeddingState.objects.for_tenant(alice.tenant).filter(message_id=gone).exists()
    assert gone not in found(alice, "plane late")


def test_mail_dated_in_the_future_or_undated_is_still_found(alice: Person, tmp_path: Path) -> None:
    MAIL["future"] = ("Wombat census", "Z <z@z.test>", "count", datetime.now(UTC) + timedelta(days=400), None)
    try:
        ids = load(alice, tmp_path, prefix="alice", keys=["future"])
    finally:
        del MAIL["future"]
    assert found(alice, "wombat census", mode="keyword") == [ids["future"]]


# ---------------------------------------------------------------- mail arriving by sync


def test_a_message_arriving_by_sync_is_found_by_meaning_after_the_enricher_runs(
    alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer
) -> None:
    alice_account, alice_user = connect(alice, imap_server, smtp_server)
    mallory_account, mallory_user = connect(mallory, imap_server, smtp_server)
    for user, account, prefix in ((alice_user, alice_account, "a"), (mallory_user, mallory_account, "m")):
        imap_server.append(user, "INBOX", raw("flight", prefix))
        imap_server.append(user, "INBOX", raw("dentist", prefix))
        sync(account)
    mine = {m.message_id: str(m.pk) for m in Message.objects.for_tenant(alice.tenant)}
    flight = mine["a-flight@example.test"]

    before = call(as_person(alice), "search", {"query": "plane late", "account_id": alice_account})
    assert before["index_complete"] is False and flight not in hits(before)
    assert call(as_person(alice), "status")["search"]["waiting"] == 2

    enrich_pending()
    after = call(as_person(alice), "search", {"query": "plane late", "account_id": alice_account})
    assert hits(after)[0] == flight and after["index_complete"] is True
    assert set(hits(after)) <= set(mine.values())
    status = call(as_person(alice), "status")["search"]
    assert (status["messages"], status["indexed"], status["waiting"]) == (2, 2, 0)
    theirs = found(mallory, "plane late")
    assert theirs and not set(theirs) & set(mine.values())
