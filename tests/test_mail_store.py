"""What the shared store (apps.mail.store.MessageStore) writes, column by column, for imports and sync.

Rows go by binary COPY with JSON serialized once per distinct value and ids of odd shapes passed to the
duplicate, mention and subject probes as array literals: every stored value is checked against what the
parser made of the message, threads against the messages in them, and Message-IDs with quotes,
backslashes, commas and braces must still be found again by a later import. Mallory imports the same
mail into her own tenant: neither sees the other's rows or threads.
"""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from apps.mail.importing import import_mail
from apps.mail.models import Attachment, Message, RawMessage, Thread
from apps.mail.parsing.headers import Address
from apps.mail.parsing.message import parse_message
from apps.workspaces.models import Tenant
from bench.import_mail import make_message
from tests.conftest import Person
from tests.mailfactory import raw_message, write_mbox

FIXTURES = Path(__file__).parent / "fixtures" / "mail"
ODD_ID = '<we"ird\\id,{x}@example.test>'


def _mix() -> list[bytes]:
    """The benchmark's message mix (plain, HTML-only, multipart with attachments, conversations of five), the
    fixtures, and messages with NUL characters and odd Message-IDs."""
    rng = random.Random(3)
    messages = [make_message(i, rng) for i in range(40)]
    messages += [path.read_bytes() for path in sorted(FIXTURES.glob("*.eml"))]
    messages.append(raw_message(subject="nul \x00 here", body="a\x00b\n", message_id="<nul@example.test>"))
    messages.append(raw_message(subject="Odd one", message_id=ODD_ID))
    return messages


def _import(person: Person, tmp_path: Path, name: str, messages: list[bytes], batch_size: int = 7) -> None:
    source = write_mbox(tmp_path / name, messages)
    import_mail(
        tenant=person.tenant, workspace=person.workspace, account_name="Store", path=source, batch_size=batch_size
    )


def _expected_references(message_id_header: str, in_reply_to: str, references: list[str]) -> list[str]:
    refs = list(references)
    if in_reply_to and in_reply_to not in refs:
        refs.append(in_reply_to)
    return refs


def _clean(text: str) -> str:
    return text.replace("\x00", "\ufffd")


def _addresses(items: list[Address]) -> list[dict[str, str]]:
    return [{"name": _clean(a.name), "address": _clean(a.address)} for a in items]


def test_every_column_is_what_the_parser_made_of_the_message(alice: Person, mallory: Person, tmp_path: Path) -> None:
    messages = _mix()
    _import(alice, tmp_path, "a", messages)
    stored = {m.content_hash: m for m in Message.objects.for_tenant(alice.tenant)}
    assert len(stored) == len({parse_message(raw).content_hash for raw in messages})
    for raw in messages:
        parsed = parse_message(raw)
        row = stored[parsed.content_hash]
        assert row.message_id == _clean(parsed.message_id)
        assert row.in_reply_to == _clean(parsed.in_reply_to)
        assert row.references == _expected_references(parsed.message_id, parsed.in_reply_to, parsed.references)
        assert row.subject == _clean(parsed.subject)
        assert (row.sender_name, row.sender_address) == (
            (_clean(parsed.sender.name), _clean(parsed.sender.address)) if parsed.sender else ("", "")
        )
        assert row.to_addresses == _addresses(parsed.to)
        assert row.cc_addresses == _addresses(parsed.cc)
        assert row.bcc_addresses == _addresses(parsed.bcc)
        assert row.reply_to_addresses == _addresses(parsed.reply_to)
        assert row.date == (parsed.date or row.received_at)
        assert (row.text_body, row.html_body, row.snippet) == (
            _clean(parsed.text_body),
            _clean(parsed.html_body),
            _clean(parsed.snippet),
        )
        assert (row.size, row.read, row.pinned) == (parsed.size, False, False)
        assert row.has_attachments == any(not a.inline for a in parsed.attachments)
        assert row.headers == {k: _clean(v) for k, v in parsed.headers.items()}
        assert (row.imap_folder_id, row.imap_uid) == (None, None)
        assert bytes(RawMessage.objects.for_tenant(alice.tenant).get(message=row).data) == raw
        attachments = Attachment.objects.for_tenant(alice.tenant).filter(message=row).order_by("filename")
        assert sorted(
            (a.filename, a.content_type, a.size, a.inline, bytes(a.content), a.extracted_text) for a in attachments
        ) == sorted(
            (_clean(a.filename), a.content_type, a.size, a.inline, a.content, _clean(a.extracted_text))
            for a in parsed.attachments
        )
    assert not Message.objects.for_tenant(mallory.tenant).exists()


def _check_threads(tenant: Tenant) -> dict[str, list[str]]:
    """Each thread's counts and dates are those of its messages; returns subject -> message ids per thread."""
    members: dict[object, list[Message]] = defaultdict(list)
    for message in Message.objects.for_tenant(tenant):
        members[message.thread_id].append(message)
    threads = {t.pk: t for t in Thread.objects.for_tenant(tenant)}
    assert set(threads) == set(members)  # no thread without messages, none missing
    out = {}
    for thread_id, messages in members.items():
        thread = threads[thread_id]
        assert thread.message_count == len(messages)
        dates = [m.date for m in messages if m.date is not None]
        assert len(dates) == len(messages)  # the store dates every message (its Date, else its arrival)
        assert (thread.first_message_at, thread.last_message_at) == (min(dates), max(dates))
        out[thread.subject] = sorted(m.message_id for m in messages)
    return out


def test_threads_hold_the_counts_and_dates_of_their_messages(alice: Person, mallory: Person, tmp_path: Path) -> None:
    rng = random.Random(9)
    conversation = [make_message(i, rng) for i in range(12)]
    # the replies first, then their parents (merges), in batches that split conversations
    _import(alice, tmp_path, "a", conversation[6:], batch_size=4)
    _import(alice, tmp_path, "b", conversation[:6], batch_size=4)
    _import(mallory, tmp_path, "m", conversation[:3])
    alice_threads = _check_threads(alice.tenant)
    assert sorted(len(ids) for ids in alice_threads.values()) == [2, 5, 5]
    assert sorted(len(ids) for ids in _check_threads(mallory.tenant).values()) == [3]


def test_odd_message_ids_are_found_again_by_later_imports(alice: Person, mallory: Person, tmp_path: Path) -> None:
    when = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    parent = raw_message(subject='Budget "Q1" \\ {draft}', message_id=ODD_ID, date=when)
    _import(alice, tmp_path, "a", [parent])
    # duplicate check: the same message again is a duplicate, found by its odd id
    _import(alice, tmp_path, "b", [parent])
    assert Message.objects.for_tenant(alice.tenant).count() == 1
    # mention probe: a reply naming the odd id joins its thread
    reply = raw_message(subject="Re: other", message_id="<r1@example.test>", in_reply_to=ODD_ID, date=when)
    # subject probe: a reply without references, with the odd subject, joins it too
    by_subject = raw_message(subject='Re: Budget "Q1" \\ {draft}', message_id="<r2@example.test>", date=when)
    _import(alice, tmp_path, "c", [reply])
    _import(alice, tmp_path, "d", [by_subject])
    held = {m.message_id: m.thread_id for m in Message.objects.for_tenant(alice.tenant)}
    assert held.keys() == {ODD_ID[1:-1], "r1@example.test", "r2@example.test"}
    assert len(set(held.values())) == 1
    assert _check_threads(alice.tenant) == {
        'Budget "Q1" \\ {draft}': sorted(held),
    }
    assert not Thread.objects.for_tenant(mallory.tenant).exists()
