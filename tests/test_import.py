"""`oaken import-mail`: mbox, Maildir and .eml folders into a local account, without loss or duplicates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from apps.mail.importing import import_mail
from apps.mail.models import (
    Attachment,
    FolderKind,
    ImportFailure,
    ImportRun,
    MailAccount,
    Message,
    RawMessage,
    Thread,
)
from apps.workspaces.models import Workspace
from tests.commands import run_json
from tests.conftest import Person
from tests.mailfactory import raw_message, write_eml_folder, write_maildir, write_mbox

HTML_ONLY = b"""From: =?utf-8?q?Fran=C3=A7oise?= <francoise@example.test>
To: alice@example.test
Subject: =?utf-8?b?w4ljaGFuZ2Ugc3VyIGxlIHByb2pldA==?=
Message-ID: <html-only@example.test>
Date: Mon, 02 Mar 2026 10:00:00 +0100
MIME-Version: 1.0
Content-Type: text/html; charset=utf-8

<html><head><style>p {color: red}</style></head><body><p>Bonjour,</p>
<ul><li>premier point</li><li>second point</li></ul>
<p>Voir <a href="https://example.test/doc">le document</a>.</p></body></html>
"""

WITH_ATTACHMENTS = b"""From: Bob <bob@example.test>
To: alice@example.test, Carol <carol@example.test>
Cc: dave@example.test
Subject: Report
Message-ID: <with-attachments@example.test>
Date: Tue, 03 Mar 2026 11:00:00 +0000
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="outer"

--outer
Content-Type: multipart/alternative; boundary="alt"

--alt
Content-Type: text/plain; charset=utf-8

See the attached notes.
--alt
Content-Type: text/html; charset=utf-8

<p>See the attached <b>notes</b>.</p>
--alt--
--outer
Content-Type: text/plain; charset=utf-8; name="notes.txt"
Content-Disposition: attachment; filename="notes.txt"

quarterly numbers are up
--outer
Content-Type: application/octet-stream; name="blob.bin"
Content-Disposition: attachment; filename="blob.bin"
Content-Transfer-Encoding: base64

AAECAwQ=
--outer
Content-Type: message/rfc822

From: Erin <erin@example.test>
Subject: Forwarded original
Message-ID: <inner@example.test>

The inner message text.
--outer--
"""

NO_MESSAGE_ID = raw_message(subject="No id here", message_id=None, body="Nobody gave me an id.\n")
GARBAGE = b"\x00\x01\x02\xff\xfe binary junk without headers \x00\x00"


def _cli(*args: str) -> tuple[int, Any]:
    return run_json("import_mail", *args)


def _tricky_mbox(tmp_path: Path) -> Path:
    plain = raw_message(subject="Plain", message_id="<plain@example.test>")
    return write_mbox(tmp_path / "tricky.mbox", [plain, HTML_ONLY, WITH_ATTACHMENTS, NO_MESSAGE_ID])


def test_it_imports_an_mbox_and_reports_counts(alice: Person, mallory: Person, tmp_path: Path) -> None:
    code, result = _cli(str(_tricky_mbox(tmp_path)), "--user", alice.user.email, "--account", "Archive 2026")
    assert code == 0
    assert (result["imported"], result["duplicates"], result["failed"]) == (4, 0, 0)
    account = MailAccount.objects.for_tenant(alice.tenant).get(pk=result["account_id"])
    assert (account.name, account.kind, account.workspace_id) == ("Archive 2026", "local", alice.workspace.id)
    messages = Message.objects.for_tenant(alice.tenant).filter(account=account)
    assert messages.count() == 4
    assert {m.folder.kind for m in messages} == {FolderKind.INBOX}
    run = ImportRun.objects.for_tenant(alice.tenant).get(pk=result["import_id"])
    assert (run.state, run.imported, run.source_kind) == ("done", 4, "mbox")
    # the second tenant saw nothing of it
    assert not Message.objects.for_tenant(mallory.tenant).exists()
    assert not MailAccount.objects.for_tenant(mallory.tenant).exists()


def test_it_stores_decoded_headers_bodies_and_attachments(alice: Person, mallory: Person, tmp_path: Path) -> None:
    import_mail(tenant=alice.tenant, workspace=alice.workspace, account_name="A", path=_tricky_mbox(tmp_path))
    messages = Message.objects.for_tenant(alice.tenant)

    html = messages.get(message_id="html-only@example.test")
    assert html.subject == "Échange sur le projet"
    assert (html.sender_name, html.sender_address) == ("Françoise", "francoise@example.test")
    assert "Bonjour," in html.text_body
    assert "premier point" in html.text_body and "second point" in html.text_body
    assert "https://example.test/doc" in html.text_body
    assert "color: red" not in html.text_body
    assert "<p>" in html.html_body
    assert html.snippet.startswith("Bonjour,")
    assert (html.read, html.pinned) == (False, False)

    report = messages.get(message_id="with-attachments@example.test")
    assert report.text_body.strip() == "See the attached notes."
    assert [a["address"] for a in report.to_addresses] == ["alice@example.test", "carol@example.test"]
    assert report.to_addresses[1]["name"] == "Carol"
    assert [a["address"] for a in report.cc_addresses] == ["dave@example.test"]
    assert report.has_attachments
    attachments = {a.filename: a for a in Attachment.objects.for_tenant(alice.tenant).filter(message=report)}
    assert bytes(attachments["notes.txt"].content) == b"quarterly numbers are up"
    assert "quarterly numbers" in attachments["notes.txt"].extracted_text
    assert bytes(attachments["blob.bin"].content) == b"\x00\x01\x02\x03\x04"
    assert attachments["blob.bin"].extracted_text == ""
    inner = [a for a in attachments.values() if a.content_type == "message/rfc822"]
    assert len(inner) == 1 and "The inner message text." in inner[0].extracted_text

    raw = RawMessage.objects.for_tenant(alice.tenant).get(message=report)
    assert bytes(raw.data).startswith(b"From: Bob")

    missing = messages.get(subject="No id here")
    assert missing.message_id == ""
    assert len(missing.content_hash) == 64
    assert not Attachment.objects.for_tenant(mallory.tenant).exists()


def test_reimporting_the_same_source_adds_nothing(alice: Person, mallory: Person, tmp_path: Path) -> None:
    source = _tricky_mbox(tmp_path)
    args = (str(source), "--user", alice.user.email)
    assert _cli(*args)[1]["imported"] == 4
    code, again = _cli(*args)
    assert code == 0
    assert (again["imported"], again["duplicates"], again["failed"]) == (0, 4, 0)
    assert Message.objects.for_tenant(alice.tenant).count() == 4
    # The same file in another tenant is that tenant's own mail, not a duplicate of alice's.
    code, theirs = _cli(str(source), "--user", mallory.user.email)
    assert (theirs["imported"], theirs["duplicates"]) == (4, 0)
    assert Message.objects.for_tenant(alice.tenant).count() == 4


def test_same_message_id_with_other_content_is_not_a_duplicate(alice: Person, mallory: Person, tmp_path: Path) -> None:
    first = raw_message(message_id="<same@example.test>", body="one\n")
    second = raw_message(message_id="<same@example.test>", body="two\n")
    counts = import_mail(
        tenant=alice.tenant,
        workspace=alice.workspace,
        account_name="A",
        path=write_mbox(tmp_path / "m", [first, second, first]),
    )
    assert (counts.imported, counts.duplicates) == (2, 1)
    assert not Message.objects.for_tenant(mallory.tenant).exists()


def test_a_message_that_cannot_be_parsed_is_recorded_and_does_not_stop_the_import(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    folder = write_eml_folder(
        tmp_path / "eml", [raw_message(message_id="<a@x>"), GARBAGE, raw_message(message_id="<b@x>")]
    )
    code, result = _cli(str(folder), "--user", alice.user.email)
    assert code == 0
    assert (result["imported"], result["failed"]) == (2, 1)
    failure = ImportFailure.objects.for_tenant(alice.tenant).get()
    assert failure.position.endswith("message-0001.eml")
    assert "junk" not in failure.reason and failure.reason
    assert not ImportFailure.objects.for_tenant(mallory.tenant).exists()


def test_it_reads_maildirs_and_eml_folders(alice: Person, mallory: Person, tmp_path: Path) -> None:
    maildir = write_maildir(tmp_path / "Maildir", [raw_message(message_id=f"<md{i}@x>") for i in range(3)])
    eml = write_eml_folder(tmp_path / "eml", [raw_message(message_id=f"<e{i}@x>") for i in range(4)])
    assert _cli(str(maildir), "--user", alice.user.email, "--account", "md")[1]["imported"] == 3
    assert _cli(str(eml), "--user", alice.user.email, "--account", "eml")[1]["imported"] == 4
    by_account = {
        a.name: Message.objects.for_tenant(alice.tenant).filter(account=a).count()
        for a in MailAccount.objects.for_tenant(alice.tenant)
    }
    assert by_account == {"md": 3, "eml": 4}
    assert not Message.objects.for_tenant(mallory.tenant).exists()


def test_it_imports_into_the_named_workspace(alice: Person, mallory: Person, tmp_path: Path) -> None:
    work = Workspace.objects.create(tenant=alice.tenant, name="work")
    source = write_mbox(tmp_path / "m", [raw_message()])
    result = _cli(str(source), "--user", alice.user.email, "--workspace", "work")[1]
    assert MailAccount.objects.for_tenant(alice.tenant).get(pk=result["account_id"]).workspace == work
    # mallory cannot name alice's workspace: hers has no "work"
    code, refused = _cli(str(source), "--user", mallory.user.email, "--workspace", "work")
    assert code == 1 and refused["error"]["code"] == "NOT_FOUND" and refused["error"]["field"] == "workspace"
    # nor alice's tenant
    code, refused = _cli(str(source), "--user", mallory.user.email, "--tenant", str(alice.tenant.pk))
    assert code == 1 and refused["error"]["field"] == "tenant"
    assert not Message.objects.for_tenant(mallory.tenant).exists()


def test_a_bad_path_is_refused_without_echoing_it(alice: Person, tmp_path: Path) -> None:
    missing = tmp_path / "secret-name-zq"
    code, result = _cli(str(missing), "--user", alice.user.email)
    assert code == 1
    assert result["error"]["code"] == "INVALID_INPUT" and result["error"]["field"] == "path"
    assert "secret-name-zq" not in json.dumps(result)
    assert not MailAccount.objects.for_tenant(alice.tenant).exists()


def test_unknown_people_are_refused(db: None, tmp_path: Path) -> None:
    code, result = _cli(str(tmp_path), "--user", "nobody@example.test")
    assert code == 1 and result["error"] == {
        "code": "NOT_FOUND",
        "field": "user",
        "message": "no such person",
    }


def test_threads_stay_per_tenant(alice: Person, mallory: Person, tmp_path: Path) -> None:
    source = write_mbox(
        tmp_path / "m",
        [raw_message(message_id="<p@x>"), raw_message(message_id="<c@x>", in_reply_to="<p@x>")],
    )
    import_mail(tenant=alice.tenant, workspace=alice.workspace, account_name="A", path=source)
    import_mail(tenant=mallory.tenant, workspace=mallory.workspace, account_name="A", path=source)
    assert Thread.objects.for_tenant(alice.tenant).count() == 1
    assert Thread.objects.for_tenant(mallory.tenant).count() == 1
    alice_thread = Thread.objects.for_tenant(alice.tenant).get()
    assert set(Message.objects.for_tenant(alice.tenant).values_list("thread_id", flat=True)) == {alice_thread.id}
    assert not Message.objects.for_tenant(mallory.tenant).filter(thread=alice_thread).exists()


@pytest.mark.parametrize("batch_size", [1, 500])
def test_nul_characters_do_not_break_the_import(alice: Person, tmp_path: Path, batch_size: int) -> None:
    source = write_mbox(tmp_path / "m", [raw_message(subject="nul", body="a\x00b\n")])
    counts = import_mail(
        tenant=alice.tenant, workspace=alice.workspace, account_name="A", path=source, batch_size=batch_size
    )
    assert counts.imported == 1
    assert "\x00" not in Message.objects.for_tenant(alice.tenant).get().text_body
