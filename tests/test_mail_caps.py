"""Text taken from mail is bounded in every answer: past MAIL_FIELD_MAX_CHARS a field is cut and says so."""

from __future__ import annotations

from pathlib import Path

from apps.mail.importing import import_mail
from apps.mail.models import Message
from apps.operations.defs.shapes import CUT_MARK
from tests.callers import as_person, call
from tests.conftest import Person
from tests.mailfactory import raw_message, write_mbox


def _import(person: Person, tmp: Path, subject: str, sender: str) -> str:
    mbox = write_mbox(tmp / f"{person.user.pk}.mbox", [raw_message(subject=subject, sender=sender)])
    counts = import_mail(tenant=person.tenant, workspace=person.workspace, account_name="local", path=mbox)
    return str(Message.objects.for_tenant(person.tenant).get(account_id=counts.account_id).pk)


def test_a_huge_subject_and_sender_name_are_cut_and_say_so(
    alice: Person, mallory: Person, tmp_path: Path, settings
) -> None:
    limit = settings.OPERATIONS["MAIL_FIELD_MAX_CHARS"]
    subject, name = " ".join(["S" * 70] * 340), "N" * 5_000
    message_id = _import(alice, tmp_path, subject, f"{name} <sender@example.test>")
    _import(mallory, tmp_path, "Short", "Bob <bob@example.test>")
    stored = Message.objects.for_tenant(alice.tenant).get(pk=message_id)
    assert len(stored.subject) > 20_000 and len(stored.sender_name) == 5_000  # stored whole (folded lines joined)
    [listed] = call(as_person(alice), "list_messages", {})["messages"]
    mark, name_mark = CUT_MARK.format(length=len(stored.subject)), CUT_MARK.format(length=5_000)
    assert listed["subject"] == stored.subject[: limit - len(mark)] + mark and len(listed["subject"]) == limit
    assert listed["sender"]["name"] == "N" * (limit - len(name_mark)) + name_mark
    got = call(as_person(alice), "get_message", {"message_id": message_id})["message"]
    assert got["subject"] == listed["subject"]
    # short text passes as it is, and another tenant's mail is its own
    [theirs] = call(as_person(mallory), "list_messages", {})["messages"]
    assert (theirs["subject"], theirs["sender"]["name"]) == ("Short", "Bob")
