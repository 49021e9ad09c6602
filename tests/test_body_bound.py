"""One body bound for every operation door (OPERATION_BODY_MAX_BYTES), applied first and answered as JSON: the
console (a session and its CSRF token, through DRF) takes a file of three megabytes as MCP does, where Django's
DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB) answered an HTML page before; a body that says it is larger is answered 413
LIMIT_EXCEEDED in the one error shape before a session, a CSRF token or a credential is looked at, by the test
client's doors, the real web server (gunicorn) and in Chromium on /mail. Mallory's tenant sees none of it."""

from __future__ import annotations

import base64
import json
import socket
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.test import Client

from apps.outbound.models import Draft, OutboundAttachment
from tests.conftest import Person
from tests.mailservers import ImapServer, SmtpServer
from tests.outbound_accounts import imap_account, mail_user
from tests.test_input_items import Web, _session_headers
from tests.test_mcp_door import key_for, rpc
from tests.test_mcp_door import post as mcp_post
from tests.test_rest_door import api_client, error_of, post

if TYPE_CHECKING:
    from playwright.sync_api import FilePayload, Page

THREE_MB = bytes(range(256)) * (3 * 4096)  # 3 MiB, every byte value; 4 MiB in base64


def _draft(account: Any, data: bytes = THREE_MB, name: str = "scan.bin") -> dict[str, Any]:
    encoded = base64.b64encode(data).decode()
    return {
        "account_id": str(account.pk),
        "to": ["bob@example.test"],
        "subject": "The scan",
        "attachments": [{"filename": name, "content_type": "application/octet-stream", "content_base64": encoded}],
    }


def _held(person: Person) -> list[tuple[str, bytes]]:
    rows = OutboundAttachment.objects.for_tenant(person.tenant).filter(draft__isnull=False).order_by("position")
    return [(row.filename, bytes(row.content)) for row in rows]


@pytest.fixture
def accounts(alice: Person, mallory: Person, imap_server: ImapServer, smtp_server: SmtpServer) -> dict[str, Any]:
    return {
        "alice": imap_account(alice, imap_server, smtp_server, mail_user(imap_server, "alice")),
        "mallory": imap_account(mallory, imap_server, smtp_server, mail_user(imap_server, "mallory")),
    }


def _assert_too_large(response: Any) -> None:
    assert response.status_code == 413 and response["Content-Type"] == "application/json"
    error = error_of(response)
    assert error["code"] == "LIMIT_EXCEEDED"
    assert error["message"].startswith("the request body is larger than the largest call allows")


def test_the_console_takes_a_file_of_three_megabytes_as_mcp_does(
    client: Client, alice: Person, mallory: Person, accounts: dict[str, Any]
) -> None:
    body = json.dumps(_draft(accounts["alice"]))
    assert len(body) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE  # Django's own bound, which answered a page before

    console = api_client(alice.user)  # the session and its CSRF token, as the console's pages send them
    response = post(console, "create_draft", raw=body)
    assert response.status_code == 200, response.content[:300]
    draft = response.json()
    assert [(a["filename"], a["size"]) for a in draft["attachments"]] == [("scan.bin", len(THREE_MB))]
    assert _held(alice) == [("scan.bin", THREE_MB)]
    # changed with another file of the same size, from the console too
    changed = _draft(accounts["alice"], THREE_MB[::-1], "second.bin")["attachments"]
    kept = [{"draft_attachment_id": draft["attachments"][0]["id"]}, *changed]
    response = post(console, "update_draft", {"draft_id": draft["id"], "attachments": kept})
    assert response.status_code == 200
    assert _held(alice) == [("scan.bin", THREE_MB), ("second.bin", THREE_MB[::-1])]

    # the CSRF check still holds for a large body: without the token, refused in the error shape
    response = post(api_client(alice.user, csrf=False), "create_draft", raw=body)
    assert response.status_code == 403 and error_of(response)["code"] == "FORBIDDEN"

    # MCP takes the same call, and mallory's tenant has none of alice's files (nor can it reach her account)
    key = key_for(alice, ["read", "write"])
    made = mcp_post(
        client, rpc("tools/call", {"name": "create_draft", "arguments": _draft(accounts["alice"])}), token=key
    )
    assert made.status_code == 200 and made.json()["result"].get("isError") is not True
    assert Draft.objects.for_tenant(alice.tenant).count() == 2
    response = post(api_client(mallory.user), "create_draft", raw=body)
    assert response.status_code == 404 and error_of(response)["field"] == "account_id"
    assert _held(mallory) == [] and not Draft.objects.for_tenant(mallory.tenant).exists()


def test_a_body_over_the_bound_is_answered_413_in_the_error_shape_before_anything_else(
    client: Client, alice: Person, mallory: Person, accounts: dict[str, Any], settings: Any
) -> None:
    body = json.dumps(_draft(accounts["alice"]))
    settings.OPERATION_BODY_MAX_BYTES = len(body) - 1

    # the console's endpoint: with the session and its token, without a session, with a wrong token
    _assert_too_large(post(api_client(alice.user), "create_draft", raw=body))
    _assert_too_large(post(api_client(), "create_draft", raw=body))
    wrong = api_client(alice.user)
    wrong.defaults["HTTP_X_CSRFTOKEN"] = "x" * 32
    _assert_too_large(post(wrong, "create_draft", raw=body))
    # any content type, any path under /api/ (an unknown operation too), and /mcp with or without a credential
    _assert_too_large(post(api_client(alice.user), "create_draft", raw=body, content_type="text/plain"))
    _assert_too_large(post(api_client(alice.user), "no_such_operation", raw=body))
    envelope = json.dumps(rpc("tools/call", {"name": "create_draft", "arguments": _draft(accounts["alice"])}))
    _assert_too_large(mcp_post(client, envelope))
    _assert_too_large(mcp_post(client, envelope, token=key_for(alice, ["read", "write"])))
    assert not Draft.objects.for_tenant(alice.tenant).exists()

    # at the bound, the same body is taken
    settings.OPERATION_BODY_MAX_BYTES = len(body)
    assert post(api_client(alice.user), "create_draft", raw=body).status_code == 200
    assert Draft.objects.for_tenant(alice.tenant).count() == 1
    assert not Draft.objects.for_tenant(mallory.tenant).exists()


def _declared_only(url: str, path: str, length: int, headers: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """A POST that declares `length` bytes and sends none of them: the status line, and the JSON answered."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=30) as conn:
        head = [f"POST {path} HTTP/1.1", f"Host: {parts.netloc}", "Content-Type: application/json"]
        head += [f"{name}: {value}" for name, value in headers.items()]
        head += [f"Content-Length: {length}", "Connection: close"]
        conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            answer += chunk
    status, _, rest = answer.decode().partition("\r\n")
    return status, json.loads(rest.partition("\r\n\r\n")[2])


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_web_server_takes_three_megabytes_from_the_console_and_refuses_a_larger_body_before_it_is_sent(
    live_url: str, alice: Person, mallory: Person, accounts: dict[str, Any]
) -> None:
    web = Web(live_url)
    status, body, content_type, seconds = web.post(
        "/api/v1/ops/create_draft", json.dumps(_draft(accounts["alice"])).encode(), _session_headers(alice)
    )
    assert status == 200 and content_type == "application/json", body
    assert [(a["filename"], a["size"]) for a in body["attachments"]] == [("scan.bin", len(THREE_MB))]
    assert _held(alice) == [("scan.bin", THREE_MB)]
    print(f"\na draft with a file of 3 MiB, from the console's endpoint: {seconds:.3f} s")

    over = settings.OPERATION_BODY_MAX_BYTES + 1
    for path, headers in (
        ("/api/v1/ops/create_draft", _session_headers(alice)),
        ("/api/v1/ops/create_draft", {}),
        ("/mcp", {"Authorization": "Bearer " + key_for(alice, ["read", "write"])}),
    ):
        status_line, answer = _declared_only(live_url, path, over, headers)
        assert status_line.startswith("HTTP/1.1 413"), status_line
        assert answer["error"]["code"] == "LIMIT_EXCEEDED"
    assert Draft.objects.for_tenant(alice.tenant).count() == 1
    assert not Draft.objects.for_tenant(mallory.tenant).exists()

    # a body that is not JSON is answered in the error shape too
    status, body, content_type, _ = web.post("/api/v1/ops/create_draft", b"{" * 100, _session_headers(alice))
    assert (status, content_type, body["error"]["code"]) == (400, "application/json", "INVALID_INPUT")


@pytest.mark.slow
def test_a_person_attaches_a_file_of_three_megabytes_on_the_compose_page(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person, accounts: dict[str, Any]
) -> None:
    from playwright.sync_api import expect

    from tests.test_console_browser import _sign_in

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/mail")
    page.click("#compose-new")
    expect(page.locator("#composer-title")).to_have_text("New message")
    page.fill("#compose-to", "bob@example.test")
    page.fill("#compose-subject", "The scan")
    scan: FilePayload = {"name": "scan.bin", "mimeType": "application/octet-stream", "buffer": THREE_MB}
    page.set_input_files("#compose-files", files=[scan])
    expect(page.locator("#compose-attachments li")).to_contain_text("scan.bin")
    # the file is read, sent (4 MiB of base64 in JSON) and saved with the draft: wait for it to be held
    deadline = time.monotonic() + 60
    while not _held(alice) and time.monotonic() < deadline:
        expect(page.locator("#compose-state")).not_to_contain_text("Not saved")  # before: "The server answered 400"
        time.sleep(0.2)
    expect(page.locator("#compose-state")).to_contain_text("Draft saved at")
    assert _held(alice) == [("scan.bin", THREE_MB)]
    assert _held(mallory) == [] and not Draft.objects.for_tenant(mallory.tenant).exists()
