"""The summary cache and the local summarizer (the group runs in this process: see conftest.summaries_here),
and the one refusal when no worker is there.

A summary is kept per tenant, content and summarizer: mallory's copy of alice's mail never gets alice's summary;
it goes when any message it was made from goes (or its account); get_message and list_messages carry it. The
local summarizer keeps a mail's point in the mail's language, without its quoted reply or signature.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, cast

import pytest
from pytest_django import Settings

from apps.audit.models import AuditEvent
from apps.core.redis_client import redis_client
from apps.mail.importing import import_mail
from apps.mail.models import Message
from apps.summaries import textrank
from apps.summaries.models import Summary, SummarySource
from apps.summaries.services import SUMMARIZE_TASK
from tests.callers import as_person, call, refusal
from tests.conftest import Person
from tests.mailfactory import conversation, raw_message, write_mbox

REPORT = (
    "The warehouse in Leeds closes on Friday for the stock count. Orders placed before noon on Thursday ship as "
    "usual. Orders placed later ship on Monday. The stock count takes the whole day, and the warehouse team will "
    "report missing stock to the buyers on Monday. Coffee is in the kitchen.\n\n"
    "-- \nAnn Smith\nWarehouse manager\n\n"
)
QUOTED = "On Mon, 2 Mar 2026 at 09:00, Bob <bob@example.test> wrote:\n> Please wire the money to account 12345 today.\n"


def _import(p: Person, tmp: Path, bodies: list[str], *, account: str = "Personal") -> list[str]:
    raws = [
        raw_message(subject=f"Note {i}", body=body, message_id=f"<note-{i}@example.test>")
        for i, body in enumerate(bodies)
    ]
    path = write_mbox(tmp / f"{p.user.email}-{account}.mbox", raws)
    counts = import_mail(tenant=p.tenant, workspace=p.workspace, account_name=account, path=path)
    rows = Message.objects.for_tenant(p.tenant).filter(account_id=counts.account_id).order_by("message_id")
    return [str(pk) for pk in rows.values_list("pk", flat=True)]


def _summaries(p: Person, ids: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = call(as_person(p), "summarize_messages", {"message_ids": ids})["summaries"]
    return out


def test_the_local_summarizer_keeps_the_point_without_quotes_or_signature(
    alice: Person, mallory: Person, tmp_path: Path, settings: Settings
) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "SUMMARY_MAX_CHARS": 200}
    (summary,) = _summaries(alice, _import(alice, tmp_path, [REPORT + QUOTED]))
    text = summary["summary"]
    assert summary["state"] == "done" and 0 < len(text) <= 200 and not summary["truncated"]
    assert "stock count" in text and "Leeds" in text
    assert "wire the money" not in text and "Ann Smith" not in text and "Coffee" not in text
    assert Summary.objects.for_tenant(mallory.tenant).count() == 0


def test_the_local_summarizer_works_in_the_mail_language() -> None:
    german = (
        "Die Sitzung ist am Montag und nicht am Dienstag. Bitte bringt die Unterlagen für das Projekt mit, denn wir "
        "müssen die Zahlen für das Projekt prüfen. Das Essen gibt es danach in der Kantine. Wir sprechen dann über "
        "das Projekt und über die Zahlen des Projekts."
    )
    extract = textrank.summarize_text(german, 160)
    assert extract.language == "german" and len(extract.text) <= 160
    assert "Projekt" in extract.text and "Kantine" not in extract.text
    french = "Bonjour, la réunion est reportée à jeudi. Merci de votre compréhension et à bientôt pour la suite."
    assert textrank.summarize_text(french, 400).language == "french"
    assert textrank.summarize_text("xq zv 12", 400).language is None
    # a sentence longer than the bound is cut, and says so
    long = textrank.summarize_text("word " * 200 + ".", 60)
    assert long.truncated and len(long.text) <= 60 and long.text.endswith(textrank.ELLIPSIS)


def test_the_cache_never_crosses_tenants_even_for_identical_content(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    mine = _import(alice, tmp_path, [REPORT])
    theirs = _import(mallory, tmp_path, [REPORT])
    assert (
        Message.objects.for_tenant(alice.tenant).get(pk=mine[0]).content_hash
        == Message.objects.for_tenant(mallory.tenant).get(pk=theirs[0]).content_hash
    )
    _summaries(alice, mine)
    # mallory's copy has no summary until she asks for one, and hers is her own row
    her_message = call(as_person(mallory), "get_message", {"message_id": theirs[0]})["message"]
    assert her_message["summary"] is None
    assert call(as_person(mallory), "list_messages", {})["messages"][0]["summary"] is None
    assert Summary.objects.for_tenant(mallory.tenant).count() == 0
    _summaries(mallory, theirs)
    assert Summary.objects.for_tenant(mallory.tenant).count() == 1
    assert Summary.objects.for_tenant(alice.tenant).count() == 1
    # and alice cannot name mallory's message
    assert refusal(as_person(alice), "summarize_messages", {"message_ids": theirs}).code == "NOT_FOUND"


def test_get_message_and_list_messages_carry_the_cached_summary(alice: Person, mallory: Person, tmp_path: Path) -> None:
    ids = _import(alice, tmp_path, [REPORT, "Short note about lunch.\n"])
    me = as_person(alice)
    assert call(me, "get_message", {"message_id": ids[0]})["message"]["summary"] is None
    (first,) = _summaries(alice, ids[:1])
    assert call(me, "get_message", {"message_id": ids[0]})["message"]["summary"] == first["summary"]
    listed = {m["id"]: m["summary"] for m in call(me, "list_messages", {})["messages"]}
    assert listed == {ids[0]: first["summary"], ids[1]: None}
    assert not any(Message.objects.for_tenant(alice.tenant).values_list("read", flat=True))
    assert call(as_person(mallory), "list_messages", {})["messages"] == []


def test_a_summary_goes_with_any_message_it_was_made_from_and_with_its_account(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    ids = _import(alice, tmp_path, [REPORT, "Short note about lunch.\n"])
    path = write_mbox(tmp_path / "thread.mbox", conversation(3, prefix="trip", subject="Harbour trip plans"))
    counts = import_mail(tenant=alice.tenant, workspace=alice.workspace, account_name="Trips", path=path)
    thread = list(Message.objects.for_tenant(alice.tenant).filter(account_id=counts.account_id).order_by("date"))
    theirs = _import(mallory, tmp_path, [REPORT])
    _summaries(alice, ids)
    _summaries(mallory, theirs)
    out = call(as_person(alice), "summarize_thread", {"thread_id": str(thread[0].thread_id)})
    assert out["state"] == "done" and out["message_count"] == 3
    assert Summary.objects.for_tenant(alice.tenant).count() == 3

    # deleting the thread's middle message deletes the thread's summary (it quoted that message)
    Message.objects.for_tenant(alice.tenant).filter(pk=thread[1].pk).delete()
    assert Summary.objects.for_tenant(alice.tenant).filter(scope="thread").count() == 0
    assert Summary.objects.for_tenant(alice.tenant).count() == 2
    # deleting a message deletes its summary
    Message.objects.for_tenant(alice.tenant).filter(pk=ids[1]).delete()
    assert Summary.objects.for_tenant(alice.tenant).count() == 1
    # removing the account deletes the rest
    account_id = str(Message.objects.for_tenant(alice.tenant).get(pk=ids[0]).account_id)
    call(as_person(alice), "remove_mailbox", {"account_id": account_id}, confirm=True)
    assert Summary.objects.for_tenant(alice.tenant).count() == 0
    assert SummarySource.objects.for_tenant(alice.tenant).count() == 0
    # mallory's summary of the same content stays
    assert Summary.objects.for_tenant(mallory.tenant).count() == 1


def _queued_summaries() -> list[bytes]:
    found = []
    for raw in cast(list[bytes], redis_client().lrange("celery", 0, -1)):
        if json.loads(raw)["headers"]["task"] == SUMMARIZE_TASK:
            found.append(raw)
    return found


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_with_no_worker_there_the_call_is_refused_and_leaves_no_claim(
    alice: Person, mallory: Person, tmp_path: Path, settings: Settings, summaries_on_workers: None
) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "SUMMARY_WAIT_SECONDS": 1}
    ids = _import(alice, tmp_path, [REPORT])
    before = len(_queued_summaries())
    error = refusal(as_person(alice), "summarize_messages", {"message_ids": ids})
    assert error.code == "SERVICE_UNAVAILABLE" and "REPORT" not in error.message
    assert Summary.objects.for_tenant(alice.tenant).count() == 0
    event = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="summarize_messages").get()
    assert event.outcome == "SERVICE_UNAVAILABLE"
    # the task it queued waits in the broker with nothing of the mail in it, and will find its claim gone
    queued = _queued_summaries()
    assert len(queued) == before + 1
    body = base64.b64decode(json.loads(queued[0])["body"]).decode()
    assert "warehouse" not in body.lower()
    for raw in queued:
        redis_client().lrem("celery", 0, raw.decode())
    assert not Message.objects.for_tenant(alice.tenant).filter(read=True).exists()
    assert AuditEvent.objects.for_tenant(mallory.tenant).filter(operation="summarize_messages").count() == 0


def test_new_mail_of_opted_in_accounts_is_summarized_in_the_background_within_the_hourly_bound(
    alice: Person, mallory: Person, tmp_path: Path, settings: Settings
) -> None:
    from apps.summaries.newmail import summarize_new_mail
    from tests.callers import as_agent

    settings.SUMMARIES = {**settings.SUMMARIES, "NEW_MAIL": True}
    settings.OPERATIONS = {**settings.OPERATIONS, "SUMMARIES_NEW_MAIL_PER_HOUR": 3}
    before = _import(alice, tmp_path, [REPORT], account="Before")
    account_id = str(Message.objects.for_tenant(alice.tenant).get(pk=before[0]).account_id)
    # an agent can neither opt an account in nor see the operation
    assert refusal(as_agent(alice), "set_auto_summaries", {"account_id": account_id, "enabled": True}).code == (
        "NOT_AVAILABLE"
    )
    assert refusal(as_person(mallory), "set_auto_summaries", {"account_id": account_id, "enabled": True}).code == (
        "NOT_FOUND"
    )
    out = call(as_person(alice), "set_auto_summaries", {"account_id": account_id, "enabled": True})
    assert out == {"account_id": account_id, "enabled": True, "running": True}
    # mail that arrives afterwards, in the opted-in account; mallory's account is not opted in
    raws = [
        raw_message(subject=f"New {i}", body=f"Parcel {i} arrives on day {i}.\n", message_id=f"<n{i}@x>")
        for i in range(5)
    ]
    import_mail(
        tenant=alice.tenant,
        workspace=alice.workspace,
        account_name="Before",
        path=write_mbox(tmp_path / "n.mbox", raws),
    )
    _import(mallory, tmp_path, [REPORT, "Another note.\n"])

    assert summarize_new_mail() == 3  # the hour's bound
    assert Summary.objects.for_tenant(alice.tenant).filter(state="done").count() == 3
    assert summarize_new_mail() == 0  # the bound holds for the rest of the hour
    assert Summary.objects.for_tenant(mallory.tenant).count() == 0
    # the mail from before the opt-in was left alone, and nothing was marked read
    assert call(as_person(alice), "get_message", {"message_id": before[0]})["message"]["summary"] is None
    assert not Message.objects.for_tenant(alice.tenant).filter(read=True).exists()

    settings.OPERATIONS = {**settings.OPERATIONS, "SUMMARIES_NEW_MAIL_PER_HOUR": 100}
    settings.SUMMARIES = {**settings.SUMMARIES, "NEW_MAIL": False}
    assert summarize_new_mail() == 0  # off: nothing, whatever the bound
    settings.SUMMARIES = {**settings.SUMMARIES, "NEW_MAIL": True}
    call(as_person(alice), "set_auto_summaries", {"account_id": account_id, "enabled": False})
    assert summarize_new_mail() == 0  # opted out
