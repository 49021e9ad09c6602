"""What the mailbox page needs beyond reading text: a message's HTML part made safe (get_message_html, and the
frame document the console serves it in) and an attachment's file (get_attachment). Neither is offered to agents;
another tenant's ids are unknown."""

from __future__ import annotations

import base64
from email.message import EmailMessage
from pathlib import Path

from django.test import Client

from apps.mail.html import sanitize
from apps.mail.importing import import_mail
from apps.mail.models import Attachment, Message
from tests.callers import as_agent, as_person, call, refusal
from tests.conftest import Person
from tests.mailfactory import write_mbox

HOSTILE = (
    "<html><head><style>body{background:url(https://t.example/css)}</style><script>alert(1)</script></head>"
    '<body onload="alert(2)"><p style="color:red;background-image:url(https://t.example/bg)">Hello</p>'
    '<img src="https://t.example/pixel.gif" alt="pixel"><img src="cid:logo"><img src="data:image/gif;base64,R0lG">'
    '<a href="javascript:alert(3)">x</a><a href="https://example.test/page">page</a>'
    '<form action="https://t.example"><input name="password"></form><iframe src="https://t.example"></iframe>'
    "<svg><script>alert(4)</script></svg></body></html>"
)


def _import(p: Person, tmp: Path, account: str = "Personal") -> Message:
    message = EmailMessage()
    message["From"] = "Team <team@example.test>"
    message["To"] = p.user.email
    message["Subject"] = "Figures"
    message["Message-ID"] = f"<figures-{p.user.pk}-{account}@example.test>"
    message.set_content("Text part.\n")
    message.add_alternative(HOSTILE, subtype="html")
    message.add_attachment(b"a,b\n1,2\n", maintype="text", subtype="csv", filename="figures.csv")
    tmp.mkdir(parents=True, exist_ok=True)
    import_mail(
        tenant=p.tenant, workspace=p.workspace, account_name=account,
        path=write_mbox(tmp / f"{account}.mbox", [message.as_bytes()]),
    )  # fmt: skip
    return Message.objects.for_tenant(p.tenant).get(account__name=account)


def test_the_html_part_keeps_its_markup_and_loses_everything_active() -> None:
    safe = sanitize(HOSTILE)
    for gone in ("script", "alert", "onload", "<style", "url(", "<form", "<input", "<iframe", "javascript:", "cid:",
                 "data:", "t.example"):  # fmt: skip
        assert gone not in safe.html
    assert '<p style="color:red">Hello</p>' in safe.html
    assert 'href="https://example.test/page"' in safe.html and 'rel="noopener noreferrer nofollow"' in safe.html
    assert safe.remote_images == 1
    shown = sanitize(HOSTILE, remote_images=True)
    assert 'src="https://t.example/pixel.gif"' in shown.html and "cid:" not in shown.html


def test_get_message_html_and_get_attachment_for_persons_only(alice: Person, mallory: Person, tmp_path: Path) -> None:
    mine = _import(alice, tmp_path / "a")
    theirs = _import(mallory, tmp_path / "m")
    out = call(as_person(alice), "get_message_html", {"message_id": str(mine.pk)})
    assert "Hello" in out["html"] and "script" not in out["html"] and out["remote_images"] == 1
    assert "pixel.gif" not in out["html"] and out["truncated"] is False
    shown = call(as_person(alice), "get_message_html", {"message_id": str(mine.pk), "remote_images": True})
    assert "pixel.gif" in shown["html"]
    assert call(as_person(alice), "get_message", {"message_id": str(mine.pk)})["message"]["has_html"] is True
    assert Message.objects.for_tenant(alice.tenant).get(pk=mine.pk).read is False  # reading never marks read

    attachment = Attachment.objects.for_tenant(alice.tenant).get(message=mine)
    file = call(as_person(alice), "get_attachment", {"attachment_id": str(attachment.pk)})
    assert (file["filename"], file["content_type"], file["size"]) == ("figures.csv", "text/csv", 8)
    assert base64.b64decode(file["content_base64"]) == b"a,b\n1,2\n"

    their_attachment = Attachment.objects.for_tenant(mallory.tenant).get(message=theirs)
    assert refusal(as_person(alice), "get_message_html", {"message_id": str(theirs.pk)}).code == "NOT_FOUND"
    assert refusal(as_person(alice), "get_attachment", {"attachment_id": str(their_attachment.pk)}).code == "NOT_FOUND"
    for op, body in (("get_message_html", {"message_id": str(mine.pk)}), ("get_attachment", {"attachment_id": "x"})):
        assert refusal(as_agent(alice), op, body).code == "NOT_AVAILABLE"


def test_the_frame_document_runs_no_script_and_loads_images_only_when_asked(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    mine = _import(alice, tmp_path / "a")
    theirs = _import(mallory, tmp_path / "m")
    client = Client()
    client.force_login(alice.user)
    answer = client.get(f"/mail/messages/{mine.pk}/html")
    assert answer.status_code == 200 and answer["Content-Type"] == "text/html; charset=utf-8"
    policy = answer["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "img-src 'none'" in policy and "script-src" not in policy
    assert "sandbox allow-popups allow-popups-to-escape-sandbox" in policy and "frame-ancestors 'self'" in policy
    assert answer["X-Frame-Options"] == "SAMEORIGIN" and answer["Cache-Control"] == "no-store"
    body = answer.content.decode()
    assert "Hello" in body and "<script" not in body and "pixel.gif" not in body
    shown = client.get(f"/mail/messages/{mine.pk}/html?remote_images=1")
    assert "img-src http: https:" in shown["Content-Security-Policy"] and "pixel.gif" in shown.content.decode()
    assert client.get(f"/mail/messages/{theirs.pk}/html").status_code == 404
    assert client.get("/mail/messages/not-an-id/html").status_code == 404
    assert client.post(f"/mail/messages/{mine.pk}/html").status_code == 405
    # the mailbox page itself may frame only Oaken's own documents
    assert "frame-src 'self'" in client.get("/mail")["Content-Security-Policy"]
    assert "frame-src" not in client.get("/keys")["Content-Security-Policy"]
    anonymous = Client().get(f"/mail/messages/{mine.pk}/html")
    assert anonymous.status_code == 302


def test_preferences_are_each_persons_own(alice: Person, mallory: Person) -> None:
    # waiting for reply's two (the AWAITING_REPLY_DAYS default, the nudge off) are in every answer too
    waiting = {"awaiting_reply_days": 3, "awaiting_reply_nudge": False}
    assert call(as_person(alice), "get_preferences") == {"mark_read_on_open": True, "name": ""} | waiting
    assert (
        call(as_person(alice), "set_preferences", {"mark_read_on_open": False})
        == {
            "mark_read_on_open": False,
            "name": "",
        }
        | waiting
    )
    kept = {"mark_read_on_open": False, "name": ""} | waiting
    assert call(as_person(alice), "set_preferences", {}) == kept  # left out: kept
    assert call(as_person(alice), "get_preferences") == kept
    assert call(as_person(mallory), "get_preferences") == {"mark_read_on_open": True, "name": ""} | waiting
    assert refusal(as_agent(alice), "set_preferences", {"mark_read_on_open": True}).code == "NOT_AVAILABLE"
    assert refusal(as_person(alice), "set_preferences", {"mark_read_on_open": "maybe"}).field == "mark_read_on_open"
