"""Embeddings from an OpenAI-compatible server (issue 15, point 3), against a real HTTP stand-in on loopback.

The stand-in (tests/embeddings_server.py) embeds with meaning, checks the bearer key, records what it got and
misbehaves on request. Alice and Mallory, in two tenants, hold the same mail: Mallory's never shows in Alice's
results, and a rebuild of Alice's index never touches Mallory's. The key and the mail text never reach a log
line, an error, an audit event or a repr; a failing server loses nothing and leaves search answering by words.
"""

from __future__ import annotations

import http.client
import json
import logging
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from apps.audit.models import AuditEvent
from apps.mail.importing import import_mail
from apps.search import services as search_services
from apps.search.embedders import EmbeddingsUnavailable, OpenAIEmbedder, current_embedder
from apps.search.indexing import enrich_pending, index_state
from apps.search.models import Chunk, EmbeddingModel, EmbeddingState
from tests.callers import call, joined, refusal
from tests.conftest import Person
from tests.embeddings_server import EmbeddingsServer, embeddings_server
from tests.mailbox import person
from tests.mailfactory import BASE_DATE, raw_message, write_mbox

KEY = "sk-oaken-stand-in-4f1d9b2c7e6a0835"
MODEL = "stand-in-embed-1"
DIMENSIONS = 384  # more than the local model's 256: the stand-in pads, so its vectors keep their meaning
TIMEOUT = 1.0

# (subject, body): topics far apart, so a paraphrase finds its one message
MAIL = {
    "boiler": (
        "Boiler repair visit",
        "The plumber will come on Thursday morning to fix the central heating; the radiators stay cold until then.",
    ),
    "flight": (
        "Flight booking confirmed",
        "Your seat on the flight to Lisbon is confirmed; boarding starts at gate 12 two hours before departure.",
    ),
    "invoice": ("Quarterly invoice", "Please pay the attached bill of 1,240 euros by the end of the month."),
    "puppy": (
        "Puppy training class",
        "Bring your dog and some treats to the obedience lesson in the park on Saturday.",
    ),
    "cake": (
        "Birthday cake recipe",
        "Mix flour, sugar, eggs and butter, then bake the chocolate sponge for forty minutes.",
    ),
    "outage": (
        "Server outage report",
        "The database cluster went down at 03:00 and the website was unavailable for two hours.",
    ),
    "garden": ("Allotment news", "Plant the tulips before the frost and water the tomatoes every evening."),
    "football": (
        "Match on Sunday",
        "Our team plays the final at the stadium; kick-off is at three and the coach wants everyone warmed up.",
    ),
}
# a query per message sharing no word with it: found by meaning or not at all
MEANING = {
    "boiler": "home warmth broken, engineer arriving",
    "flight": "airplane ticket reservation",
    "invoice": "money owed, payment due",
    "puppy": "pet manners course",
    "cake": "dessert baking instructions",
    "outage": "web site crashed, computers failing",
    "garden": "gardening tips for flowers",
    "football": "sports championship",
}
LATE = ("Violin concert tickets", "The orchestra performs Brahms and Dvořák at the philharmonic hall on Friday.")
LATE_MEANING = "classical music evening"

# what EmbeddingsUnavailable may say: fixed sentences, never the server's words, the key or the texts
FIXED_MESSAGES = {
    "the embeddings server answered HTTP 401",
    "the embeddings server answered HTTP 500",
    "the embeddings server answered HTTP 302 (redirects are not followed)",
    "the embeddings server could not be reached or read",
    "the embeddings server did not answer in time",
    "the embeddings server's answer is too large",
    "the embeddings server's answer is not a list of embeddings",
    "the embeddings server's answer has the wrong shape",
}


@pytest.fixture(scope="module")
def stand_in() -> Iterator[EmbeddingsServer]:
    with embeddings_server(key=KEY) as server:
        yield server


@pytest.fixture
def server(stand_in: EmbeddingsServer) -> Iterator[EmbeddingsServer]:
    stand_in.reset()
    yield stand_in
    stand_in.reset()


def provider_settings(server: EmbeddingsServer, **changes: object) -> dict[str, object]:
    return {
        "PROVIDER": "openai",
        "BASE_URL": server.base_url,
        "API_KEY": KEY,
        "MODEL": MODEL,
        "DIMENSIONS": DIMENSIONS,
        "TIMEOUT_SECONDS": TIMEOUT,
    } | changes


LOCAL = {"PROVIDER": "local", "BASE_URL": "", "API_KEY": "", "MODEL": "", "DIMENSIONS": 256, "TIMEOUT_SECONDS": 30}


@pytest.fixture
def provider(settings: Any, server: EmbeddingsServer) -> dict[str, object]:
    """SEARCH_EMBEDDINGS naming the stand-in."""
    settings.SEARCH_EMBEDDINGS = provider_settings(server)
    return settings.SEARCH_EMBEDDINGS


@dataclass
class Box:
    person: Person
    account: str
    ids: dict[str, str] = field(default_factory=dict)  # MAIL key -> message id

    def key_of(self, message_id: str) -> str | None:
        return next((k for k, v in self.ids.items() if v == message_id), None)


def deliver(box: Box, tmp: Path, mail: dict[str, tuple[str, str]], *, start: int = 0) -> None:
    """Import these messages into the box's account (an mbox import, as mail arrives)."""
    tenant = box.person.tenant
    raws = [
        raw_message(
            subject=subject,
            body=body + "\n",
            message_id=f"<{tenant.pk}-{key}@example.test>",
            date=BASE_DATE + timedelta(minutes=start + i),
        )
        for i, (key, (subject, body)) in enumerate(mail.items())
    ]
    tmp.mkdir(parents=True, exist_ok=True)
    path = write_mbox(tmp / f"{tenant.pk}-{start}.mbox", raws)
    counts = import_mail(tenant=tenant, workspace=box.person.workspace, account_name="Personal", path=path)
    assert counts.imported == len(raws) and counts.failed == 0
    box.account = str(counts.account_id)
    from apps.mail.models import Message

    for key in mail:
        box.ids[key] = str(Message.objects.for_tenant(tenant).get(message_id=f"{tenant.pk}-{key}@example.test").pk)


@pytest.fixture
def boxes(alice: Person, mallory: Person, tmp_path: Path) -> tuple[Box, Box]:
    """Alice's and Mallory's mailboxes, holding the same mail, none of it embedded yet."""
    mine, theirs = Box(alice, ""), Box(mallory, "")
    deliver(mine, tmp_path / "alice", MAIL)
    deliver(theirs, tmp_path / "mallory", MAIL)
    return mine, theirs


def search(box: Box, query: str, mode: str) -> dict[str, Any]:
    return call(person(box.person), "search", {"query": query, "mode": mode})


def hit_ids(answer: dict[str, Any]) -> list[str]:
    return [hit["message"]["id"] for hit in answer["hits"]]


def assert_only_own(box: Box, answer: dict[str, Any]) -> None:
    """Every hit is one of this box's messages (the other tenant holds the same mail)."""
    assert set(hit_ids(answer)) <= set(box.ids.values()), answer


def waiting(box: Box) -> int:
    return index_state(tenant=box.person.tenant).waiting


def model_of_chunks(box: Box, key: str) -> set[str]:
    return set(
        Chunk.objects.for_tenant(box.person.tenant).filter(message_id=box.ids[key]).values_list("model__key", flat=True)
    )


# ---------------------------------------------------------------- embedding through the provider


def test_the_enricher_embeds_through_the_provider_and_search_finds_mail_by_meaning(
    boxes: tuple[Box, Box], server: EmbeddingsServer, provider: dict[str, object]
) -> None:
    mine, theirs = boxes
    assert waiting(mine) == waiting(theirs) == len(MAIL)
    assert current_embedder().key == f"openai/{MODEL}/{DIMENSIONS}"

    done = enrich_pending()
    assert done.messages == 2 * len(MAIL) and not done.more
    assert waiting(mine) == waiting(theirs) == 0
    model = EmbeddingModel.objects.get(key=f"openai/{MODEL}/{DIMENSIONS}")
    assert model.dimensions == DIMENSIONS
    for box in boxes:
        states = EmbeddingState.objects.for_tenant(box.person.tenant)
        assert set(states.values_list("model__key", flat=True)) == {model.key}
        assert set(Chunk.objects.for_tenant(box.person.tenant).values_list("model_id", flat=True)) == {model.pk}

    requests = server.received
    assert requests, "the enricher never called the provider"
    for r in requests:
        assert (r.method, r.path) == ("POST", "/v1/embeddings")
        assert r.headers["authorization"] == f"Bearer {KEY}"
        assert r.headers["content-type"] == "application/json"
        body = r.json
        assert set(body) == {"model", "input", "dimensions", "encoding_format"}
        assert (body["model"], body["dimensions"], body["encoding_format"]) == (MODEL, DIMENSIONS, "float")
        assert body["input"] and all(isinstance(text, str) for text in body["input"])
    # every chunk of both tenants was embedded by the stand-in, each text once
    texts = server.texts_received()
    assert len(texts) == Chunk.objects.unscoped().filter(model=model).count() == 2 * len(MAIL)
    assert sorted(texts) == sorted(2 * [f"{subject}\n{body}" for subject, body in MAIL.values()])

    for key, query in MEANING.items():
        for mode in ("semantic", "hybrid"):
            server.reset()
            answer = search(mine, query, mode)
            assert hit_ids(answer)[:1] == [mine.ids[key]], (key, mode, [mine.key_of(i) for i in hit_ids(answer)])
            assert answer["hits"][0]["matched"] == ["semantic"]
            assert answer["index_complete"] is True
            assert_only_own(mine, answer)
            # the query went to the provider too, with the key, the model and the dimensions
            assert [(r.headers["authorization"], r.json) for r in server.received] == [
                (
                    f"Bearer {KEY}",
                    {"model": MODEL, "input": [query], "dimensions": DIMENSIONS, "encoding_format": "float"},
                )
            ]
        theirs_answer = search(theirs, query, "semantic")
        assert hit_ids(theirs_answer)[:1] == [theirs.ids[key]]
        assert_only_own(theirs, theirs_answer)

    # hybrid still ranks a word match: the keyword side and the semantic side agree on the boiler
    answer = search(mine, "plumber", "hybrid")
    assert hit_ids(answer)[:1] == [mine.ids["boiler"]] and "keyword" in answer["hits"][0]["matched"]
    assert_only_own(mine, answer)


def test_an_embedder_made_by_current_embedder_follows_the_settings(
    settings: Any, server: EmbeddingsServer, db: None
) -> None:
    settings.SEARCH_EMBEDDINGS = LOCAL
    assert current_embedder().key.startswith("local/wordllama-l2_supercat@")
    settings.SEARCH_EMBEDDINGS = provider_settings(server)
    remote = current_embedder()
    assert isinstance(remote, OpenAIEmbedder) and remote.key == f"openai/{MODEL}/{DIMENSIONS}"
    settings.SEARCH_EMBEDDINGS = provider_settings(server, MODEL="another-model", DIMENSIONS=128)
    assert current_embedder().key == "openai/another-model/128"
    vectors = current_embedder().embed(["one text", "another"])
    assert vectors.shape == (2, 128)
    assert [r.json["model"] for r in server.received] == ["another-model"]


# ---------------------------------------------------------------- the key and the texts stay out of sight


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


def _error_texts(errors: list[BaseException]) -> list[str]:
    texts = []
    for error in errors:
        for one in _chain(error):
            texts += [str(one), repr(one), repr(one.args)]
        texts.append("".join(traceback.format_exception(error)))
    return texts


def _audit_texts() -> list[str]:
    texts = []
    for event in AuditEvent.objects.unscoped().all():
        for f in AuditEvent._meta.concrete_fields:
            value = getattr(event, f.attname)
            texts.append(json.dumps(value, default=str) if not isinstance(value, str) else value)
    return texts


def test_the_key_and_the_mail_never_reach_logs_errors_audit_events_or_a_repr(
    boxes: tuple[Box, Box],
    server: EmbeddingsServer,
    settings: Any,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mine = boxes[0]
    # every logger at DEBUG, and http.client's own debug output (printed, not logged) switched on
    caplog.set_level(logging.DEBUG)
    for name in list(logging.root.manager.loggerDict):
        caplog.set_level(logging.DEBUG, logger=name)
    monkeypatch.setattr(http.client.HTTPConnection, "debuglevel", 1)
    settings.SEARCH_EMBEDDINGS = provider_settings(server)

    errors: list[BaseException] = []
    assert enrich_pending().messages == 2 * len(MAIL)
    for query in MEANING.values():
        search(mine, query, "hybrid")
    for mode in ("401", "500", "junk", "nan", "hang", "redirect"):
        server.misbehave(mode)
        server.redirect_to = server.base_url + "/embeddings"
        # something waits, so the enricher calls the server
        EmbeddingState.objects.for_tenant(mine.person.tenant).filter(message_id=mine.ids["boiler"]).update(model=None)
        with pytest.raises(EmbeddingsUnavailable) as failed:
            enrich_pending()
        errors.append(failed.value)
        search(mine, "plumber", "hybrid")
        search(mine, MEANING["cake"], "semantic")
    # a wrong key: the server refuses it and quotes it back
    server.reset()
    wrong = "sk-wrong-key-0c9e1f27b3d4a856"
    settings.SEARCH_EMBEDDINGS = provider_settings(server, API_KEY=wrong)
    with pytest.raises(EmbeddingsUnavailable) as refused:
        enrich_pending()
    errors.append(refused.value)
    assert str(refused.value) == "the embeddings server answered HTTP 401"
    assert [r.headers["authorization"] for r in server.received] == [f"Bearer {wrong}"]
    search(mine, "plumber", "hybrid")

    embedder = current_embedder()
    made = OpenAIEmbedder(base_url=server.base_url, api_key=KEY, model=MODEL, dimensions=DIMENSIONS, timeout=TIMEOUT)
    shown = [repr(embedder), str(embedder), repr(made), str(made), f"{made!r} {embedder}"]
    out, err = capfd.readouterr()
    logged = [caplog.text] + [r.getMessage() for r in caplog.records] + [repr(r.args) for r in caplog.records]
    places = {
        "logs": logged,
        "output": [out, err],
        "errors": _error_texts(errors),
        "audit": _audit_texts(),
        "repr": shown,
    }
    assert places["audit"], "no audit event was written"
    assert any("embeddings server" in line for line in logged), "the failures were not logged"
    # the keys and any ten characters of their random tails (a key cut or masked still leaks)
    secrets = [KEY, wrong] + [k[i : i + 10] for k in (KEY, wrong) for i in range(len(k) - 16, len(k) - 9)]
    mail = [text for pair in MAIL.values() for text in pair] + list(MEANING.values())
    for where, texts in places.items():
        for text in texts:
            for secret in secrets:
                assert secret not in text, (where, text[:300])
            for words in mail:
                assert words not in text, (where, words, text[:300])
    for error in errors:
        assert str(error) in FIXED_MESSAGES, str(error)


# ---------------------------------------------------------------- a failing server loses nothing


NOT_READ = "the embeddings server could not be reached or read"
NOT_EMBEDDINGS = "the embeddings server's answer is not a list of embeddings"
WRONG_SHAPE = "the embeddings server's answer has the wrong shape"
FAILURES = {
    "500": "the embeddings server answered HTTP 500",
    "401": "the embeddings server answered HTTP 401",
    "hang": "the embeddings server did not answer in time",
    "trickle": "the embeddings server did not answer in time",
    "cut": NOT_READ,
    "nothttp": NOT_READ,
    "junk": NOT_EMBEDDINGS,
    "shape": NOT_EMBEDDINGS,
    "count": WRONG_SHAPE,
    "width": WRONG_SHAPE,
    "nan": NOT_EMBEDDINGS,
    "indexes": WRONG_SHAPE,
    "huge": "the embeddings server's answer is too large",
    "redirect": "the embeddings server answered HTTP 302 (redirects are not followed)",
}


@pytest.mark.parametrize("mode", list(FAILURES))
def test_a_failing_server_leaves_mail_waiting_and_search_answering_by_words(
    mode: str, boxes: tuple[Box, Box], server: EmbeddingsServer, provider: dict[str, object], tmp_path: Path
) -> None:
    mine, theirs = boxes
    assert enrich_pending().messages == 2 * len(MAIL)
    chunks_before = sorted(Chunk.objects.unscoped().values_list("message_id", "model_id", "ordinal"))
    deliver(mine, tmp_path / "late", {"late": LATE}, start=100)
    assert waiting(mine) == 1 and waiting(theirs) == 0

    with embeddings_server(host="127.0.0.2") as elsewhere:
        server.redirect_to = elsewhere.base_url + "/embeddings"
        server.misbehave(mode)
        started = time.monotonic()
        with pytest.raises(EmbeddingsUnavailable) as failed:
            enrich_pending()
        took = time.monotonic() - started
        assert str(failed.value) == FAILURES[mode] and str(failed.value) in FIXED_MESSAGES
        # one deadline for the whole call, however the server spreads its bytes
        assert took < TIMEOUT + 1, took
        # a redirect is not followed: the key and the mail never go to another host
        assert elsewhere.received == []

        # nothing lost: the late message still waits, every chunk held before is still held
        assert waiting(mine) == 1 and waiting(theirs) == 0
        assert sorted(Chunk.objects.unscoped().values_list("message_id", "model_id", "ordinal")) == chunks_before
        assert not Chunk.objects.for_tenant(mine.person.tenant).filter(message_id=mine.ids["late"]).exists()

        # search answers: by words, and (but for words alone, whose index is always current) says the index
        # is incomplete
        for search_mode in ("hybrid", "keyword"):
            answer = search(mine, "plumber", search_mode)
            assert hit_ids(answer)[:1] == [mine.ids["boiler"]], (search_mode, answer)
            assert "keyword" in answer["hits"][0]["matched"]
            assert answer["index_complete"] is (search_mode == "keyword")
            assert_only_own(mine, answer)
        answer = search(mine, "violin", "hybrid")
        assert hit_ids(answer) == [mine.ids["late"]] and answer["index_complete"] is False
        answer = search(mine, LATE_MEANING, "semantic")
        assert answer["index_complete"] is False and mine.ids["late"] not in hit_ids(answer)
        assert_only_own(mine, answer)
        # Mallory's mail is all embedded, but her query cannot be embedded either (except where a single vector
        # comes back well): she is told so rather than shown nothing as if nothing matched
        theirs_answer = search(theirs, MEANING["cake"], "semantic")
        assert_only_own(theirs, theirs_answer)
        outcomes = set(
            AuditEvent.objects.for_tenant(mine.person.tenant)
            .filter(operation="search")
            .values_list("outcome", flat=True)
        )
        assert outcomes == {"ok"}
        assert elsewhere.received == []

    # the server recovers: the late message is embedded and found by meaning
    server.reset()
    assert enrich_pending().messages == 1
    answer = search(mine, LATE_MEANING, "semantic")
    assert hit_ids(answer)[:1] == [mine.ids["late"]] and answer["index_complete"] is True
    assert_only_own(mine, answer)


def test_a_server_that_cannot_embed_a_query_makes_search_say_it_is_incomplete(
    boxes: tuple[Box, Box], server: EmbeddingsServer, provider: dict[str, object]
) -> None:
    mine = boxes[0]
    assert enrich_pending().messages == 2 * len(MAIL)
    assert search(mine, MEANING["cake"], "semantic")["index_complete"] is True
    server.misbehave("500")
    for box in boxes:
        answer = search(box, MEANING["cake"], "semantic")
        assert answer == {"hits": [], "next_cursor": None, "index_complete": False}
        answer = search(box, "chocolate sponge", "hybrid")
        assert hit_ids(answer) == [box.ids["cake"]] and answer["index_complete"] is False


# ---------------------------------------------------------------- a model change, re-embedded by rebuild_search_index


def test_a_model_change_is_re_embedded_by_rebuild_and_search_stays_right_meanwhile(
    boxes: tuple[Box, Box],
    server: EmbeddingsServer,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mine, theirs = boxes
    settings.SEARCH_EMBEDDINGS = LOCAL
    local_key = current_embedder().key
    assert enrich_pending().messages == 2 * len(MAIL)
    assert server.received == []

    settings.SEARCH_EMBEDDINGS = provider_settings(server)
    remote_key = current_embedder().key
    assert remote_key != local_key
    state = index_state(tenant=mine.person.tenant)
    assert (state.waiting, state.other_model, state.model) == (0, len(MAIL), remote_key)
    # before the rebuild, the old model's chunks still find mail by meaning (the local model embeds the query)
    for key, query in MEANING.items():
        answer = search(mine, query, "semantic")
        assert hit_ids(answer)[:1] == [mine.ids[key]] and answer["index_complete"] is True
    assert server.received == []

    # only an ADMIN may ask; a MEMBER is refused and nothing is queued
    member = joined(mine.person, "member@example.test", "MEMBER")
    assert refusal(person(member), "rebuild_search_index").code == "FORBIDDEN"
    assert waiting(mine) == 0
    admin = joined(mine.person, "admin@example.test", "ADMIN")
    queued: list[str] = []
    monkeypatch.setattr(search_services, "enrich_task", SimpleNamespace(delay=lambda: queued.append("enrich")))
    with django_capture_on_commit_callbacks(execute=True):
        out = call(person(admin), "rebuild_search_index")
    assert out == {"queued": len(MAIL), "model": remote_key}
    assert queued == ["enrich"]  # the enricher is queued once the call commits
    assert waiting(mine) == len(MAIL)
    # Mallory's index is hers: not queued, still the old model's
    assert waiting(theirs) == 0
    assert index_state(tenant=theirs.person.tenant).other_model == len(MAIL)

    half = len(MAIL) // 2
    assert enrich_pending(limit=half).messages == half
    assert len(server.texts_received()) == half  # Alice's waiting messages only
    # the re-embedded messages hold the new model's chunks beside the old ones, which stay until all are done
    moved = {key for key in MAIL if model_of_chunks(mine, key) == {local_key, remote_key}}
    stayed = {key for key in MAIL if model_of_chunks(mine, key) == {local_key}}
    assert len(moved) == half and moved | stayed == set(MAIL)
    # meanwhile every message is found by meaning as before the change, whichever were re-embedded
    for key, query in MEANING.items():
        for mode in ("semantic", "hybrid"):
            answer = search(mine, query, mode)
            assert hit_ids(answer)[:1] == [mine.ids[key]], (key, mode, [mine.key_of(i) for i in hit_ids(answer)])
            assert answer["index_complete"] is False
            assert_only_own(mine, answer)
        theirs_answer = search(theirs, query, "semantic")
        assert hit_ids(theirs_answer)[:1] == [theirs.ids[key]] and theirs_answer["index_complete"] is True
        assert_only_own(theirs, theirs_answer)

    assert enrich_pending().messages == len(MAIL) - half
    assert all(model_of_chunks(mine, key) == {remote_key} for key in MAIL)
    assert all(model_of_chunks(theirs, key) == {local_key} for key in MAIL)
    state = index_state(tenant=mine.person.tenant)
    assert (state.waiting, state.other_model) == (0, 0)
    for key, query in MEANING.items():
        answer = search(mine, query, "hybrid")
        assert hit_ids(answer)[:1] == [mine.ids[key]] and answer["index_complete"] is True
        assert_only_own(mine, answer)
    # a second rebuild finds nothing to do
    assert call(person(admin), "rebuild_search_index") == {"queued": 0, "model": remote_key}


# ---------------------------------------------------------------- over TLS


def test_the_provider_over_https_checks_the_certificate_and_keeps_the_deadline(
    boxes: tuple[Box, Box], settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, theirs = boxes
    with embeddings_server(key=KEY, tls=True) as secure:
        assert secure.base_url.startswith("https://127.0.0.1:")
        settings.SEARCH_EMBEDDINGS = provider_settings(secure)
        # a certificate nobody vouches for is refused (the key is never sent over it)
        with pytest.raises(EmbeddingsUnavailable) as refused:
            enrich_pending()
        assert str(refused.value) == "the embeddings server could not be reached or read"
        assert secure.received == []
        assert waiting(mine) == waiting(theirs) == len(MAIL)

        monkeypatch.setenv("SSL_CERT_FILE", str(secure.ca_file))
        assert enrich_pending().messages == 2 * len(MAIL)
        assert {r.headers["authorization"] for r in secure.received} == {f"Bearer {KEY}"}
        answer = search(mine, MEANING["flight"], "semantic")
        assert hit_ids(answer)[:1] == [mine.ids["flight"]] and answer["index_complete"] is True
        assert_only_own(mine, answer)

        for mode in ("hang", "trickle"):
            secure.misbehave(mode)
            started = time.monotonic()
            with pytest.raises(EmbeddingsUnavailable) as late:
                current_embedder().embed(["a question"])
            assert str(late.value) == "the embeddings server did not answer in time"
            assert time.monotonic() - started < TIMEOUT + 1


# ---------------------------------------------------------------- the provider's URL


def test_a_plain_http_url_to_another_host_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="oaken.search")
    for url in (
        "http://127.0.0.1:8080/v1",
        "http://localhost:11434/v1",
        "http://[::1]:8000/v1",
        "https://api.example.test/v1",
    ):
        OpenAIEmbedder(base_url=url, api_key=KEY, model=MODEL, dimensions=DIMENSIONS, timeout=TIMEOUT)
    assert caplog.records == []
    OpenAIEmbedder(base_url="http://embeddings.example.test/v1", api_key=KEY, model=MODEL, dimensions=8, timeout=1)
    [warning] = caplog.records
    assert warning.levelno == logging.WARNING and "unencrypted" in warning.getMessage()
    assert KEY not in caplog.text and "embeddings.example.test" not in caplog.text


@pytest.mark.parametrize(
    "url",
    [
        "ftp://127.0.0.1/v1",
        "file:///etc/passwd",
        "http:///v1",
        "http://user:pa55word@127.0.0.1/v1",
        "http://127.0.0.1/v1?key=pa55word",
        "127.0.0.1:8080/v1",
    ],
)
def test_a_url_that_cannot_be_right_is_refused_without_echoing_it(url: str) -> None:
    with pytest.raises(ValueError) as refused:
        OpenAIEmbedder(base_url=url, api_key=KEY, model=MODEL, dimensions=DIMENSIONS, timeout=TIMEOUT)
    assert "pa55word" not in str(refused.value) and url not in str(refused.value)
    settings_run = subprocess.run(
        [sys.executable, "-c", "import config.settings.search"],
        env={
            "OAKEN_EMBEDDINGS": "openai",
            "OAKEN_EMBEDDINGS_BASE_URL": url,
            "OAKEN_EMBEDDINGS_API_KEY": KEY,
            "PATH": "/usr/bin:/bin",
        },
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
        check=False,
    )
    assert settings_run.returncode != 0
    assert "ImproperlyConfigured" in settings_run.stderr and "OAKEN_EMBEDDINGS_BASE_URL" in settings_run.stderr
    assert "pa55word" not in settings_run.stderr and KEY not in settings_run.stderr


def test_a_search_waits_for_its_query_embedding_less_than_the_enricher_waits(
    boxes: tuple[Box, Box], server: EmbeddingsServer, settings: Any
) -> None:
    mine, theirs = boxes
    settings.SEARCH_EMBEDDINGS = provider_settings(server)
    assert enrich_pending().messages == 2 * len(MAIL)
    # the enricher may wait 20 s for a hanging server; a search gives up on its query's embedding after 1 s
    settings.SEARCH_EMBEDDINGS = provider_settings(server, TIMEOUT_SECONDS=20, QUERY_TIMEOUT_SECONDS=1)
    server.misbehave("hang")
    started = time.monotonic()
    answer = search(mine, "plumber", "hybrid")
    assert time.monotonic() - started < 10
    assert hit_ids(answer)[:1] == [mine.ids["boiler"]] and answer["index_complete"] is False
    assert_only_own(mine, answer)
    assert search(theirs, "plumber", "keyword")["index_complete"] is True
