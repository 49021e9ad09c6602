"""Threads from References / In-Reply-To, with a reply's subject as the fallback."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from apps.mail.importing import import_mail
from apps.mail.models import Message, Thread
from tests.conftest import Person
from tests.mailfactory import BASE_DATE, conversation, raw_message, write_mbox


def _import(
    person: Person,
    tmp_path: Path,
    messages: list[bytes],
    *,
    name: str = "m",
    batch_size: int = 500,
    account: str = "A",
) -> None:
    import_mail(
        tenant=person.tenant,
        workspace=person.workspace,
        account_name=account,
        path=write_mbox(tmp_path / name, messages),
        batch_size=batch_size,
    )


def _threads(person: Person) -> dict[str, set[str]]:
    """thread subject -> message ids in it"""
    result: dict[str, set[str]] = {}
    for thread in Thread.objects.for_tenant(person.tenant):
        ids = set(Message.objects.for_tenant(person.tenant).filter(thread=thread).values_list("message_id", flat=True))
        assert thread.message_count == len(ids)
        result.setdefault(thread.subject, set()).update(ids)
    return result


@pytest.mark.parametrize("batch_size", [1, 3, 500])
def test_a_conversation_in_order_is_one_thread(alice: Person, mallory: Person, tmp_path: Path, batch_size: int) -> None:
    _import(alice, tmp_path, conversation(6), batch_size=batch_size)
    threads = Thread.objects.for_tenant(alice.tenant)
    assert threads.count() == 1
    thread = threads.get()
    assert (thread.subject, thread.message_count) == ("Plans", 6)
    assert thread.first_message_at == BASE_DATE
    assert thread.last_message_at == BASE_DATE + timedelta(minutes=5)
    assert not Thread.objects.for_tenant(mallory.tenant).exists()


@pytest.mark.parametrize("batch_size", [1, 2, 500])
def test_replies_that_arrive_before_their_parents_join_up(
    alice: Person, mallory: Person, tmp_path: Path, batch_size: int
) -> None:
    messages = conversation(5)
    # the root last, the middle first: every message only knows its ancestors
    _import(
        alice,
        tmp_path,
        [messages[2], messages[4], messages[1], messages[3], messages[0]],
        batch_size=batch_size,
    )
    assert Thread.objects.for_tenant(alice.tenant).count() == 1
    assert Thread.objects.for_tenant(alice.tenant).get().message_count == 5
    assert not Message.objects.for_tenant(mallory.tenant).exists()


def test_later_imports_join_existing_threads(alice: Person, mallory: Person, tmp_path: Path) -> None:
    messages = conversation(4)
    _import(alice, tmp_path, messages[:2], name="first")
    _import(alice, tmp_path, messages[3:], name="second")  # references the missing #2 and the stored #0, #1
    _import(alice, tmp_path, messages[2:3], name="third")
    assert _threads(alice) == {"Plans": {f"conv-{i}@example.test" for i in range(4)}}
    assert not Thread.objects.for_tenant(mallory.tenant).exists()


def test_siblings_sharing_a_missing_parent_are_one_thread(alice: Person, mallory: Person, tmp_path: Path) -> None:
    a = raw_message(message_id="<a@x>", subject="Re: Q", in_reply_to="<missing@x>", references=["<missing@x>"])
    b = raw_message(message_id="<b@x>", subject="Re: Q", in_reply_to="<missing@x>", references=["<missing@x>"])
    _import(alice, tmp_path, [a], name="one")
    _import(alice, tmp_path, [b], name="two")
    assert Thread.objects.for_tenant(alice.tenant).count() == 1
    assert not Thread.objects.for_tenant(mallory.tenant).exists()


def test_a_reply_without_references_falls_back_to_the_subject(alice: Person, mallory: Person, tmp_path: Path) -> None:
    original = raw_message(message_id="<o@x>", subject="Lunch on Friday?", date=BASE_DATE)
    reply = raw_message(message_id="<r@x>", subject="RE:  lunch on friday?", date=BASE_DATE + timedelta(hours=2))
    forward = raw_message(message_id="<f@x>", subject="Fwd: Lunch on Friday?", date=BASE_DATE + timedelta(days=1))
    _import(alice, tmp_path, [original, reply], name="one")
    _import(alice, tmp_path, [forward], name="two")
    assert _threads(alice) == {"Lunch on Friday?": {"o@x", "r@x", "f@x"}}
    assert not Thread.objects.for_tenant(mallory.tenant).exists()


def test_same_subject_without_a_reply_prefix_stays_apart(alice: Person, mallory: Person, tmp_path: Path) -> None:
    _import(
        alice,
        tmp_path,
        [
            raw_message(message_id="<1@x>", subject="Invoice"),
            raw_message(message_id="<2@x>", subject="Invoice"),
        ],
    )
    assert Thread.objects.for_tenant(alice.tenant).count() == 2
    assert not Thread.objects.for_tenant(mallory.tenant).exists()


def test_the_subject_fallback_has_a_time_window(alice: Person, mallory: Person, tmp_path: Path, settings) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "THREAD_SUBJECT_WINDOW_DAYS": 30}
    old = raw_message(message_id="<old@x>", subject="Status", date=BASE_DATE)
    late = raw_message(message_id="<late@x>", subject="Re: Status", date=BASE_DATE + timedelta(days=90))
    _import(alice, tmp_path, [old, late])
    assert Thread.objects.for_tenant(alice.tenant).count() == 2
    assert not Thread.objects.for_tenant(mallory.tenant).exists()


def test_threads_never_span_accounts(alice: Person, mallory: Person, tmp_path: Path) -> None:
    messages = conversation(2)
    _import(alice, tmp_path, messages[:1], name="one", account="A")
    _import(alice, tmp_path, messages[1:], name="two", account="B")
    assert Thread.objects.for_tenant(alice.tenant).count() == 2
    assert not Thread.objects.for_tenant(mallory.tenant).exists()
