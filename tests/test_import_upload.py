"""Importing an uploaded file (issue 17, /import): the REST door spools the body with IMPORT_UPLOAD_MAX_BYTES
counted, the operation upload_import decides and queues the import, the worker's task runs import_mail on it
through the gate, and get_import / list_imports follow its counts; another tenant sees none of it."""

from __future__ import annotations

import io
import json
import os
import socket
import time
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from django.test import Client
from pytest_django import Settings

from apps.audit.models import AuditEvent
from apps.core import uploads
from apps.core.errors import OakenError
from apps.gate.internal import call_internal
from apps.mail import importing
from apps.mail.models import ImportRun, Message
from apps.worker.tasks import start_import_task
from tests.callers import as_person, call
from tests.conftest import Person
from tests.mailfactory import raw_message, write_mbox
from tests.test_rest_door import api_client, error_of, member_of, post

UPLOAD = "/api/v1/imports/upload"
GARBAGE = b"\x00\x01\x02\xff\xfe binary junk without headers \x00\x00"


@pytest.fixture(autouse=True)
def upload_dir(settings: Settings, tmp_path: Path) -> None:
    """Each test's uploads in a folder of its own, so what one leaves cannot pass or fail another."""
    settings.IMPORT_UPLOAD_DIR = str(tmp_path / "imports")


def _mbox_bytes(tmp_path: Path, messages: list[bytes], name: str = "box.mbox") -> bytes:
    return write_mbox(tmp_path / name, messages).read_bytes()


def _upload(client: Client, body: bytes, tenant: object = None, **params: str) -> Any:
    query = urlencode({"filename": "zq-private-name.mbox", **params})
    headers = {"Oaken-Tenant": str(tenant)} if tenant is not None else {}
    return client.post(f"{UPLOAD}?{query}", data=body, content_type="application/octet-stream", headers=headers)


def _run(p: Person, import_id: str) -> dict[str, Any]:
    """The worker's task, run here (eagerly), as the worker would: through the gate's internal door."""
    result: dict[str, Any] = start_import_task.apply(
        kwargs={"tenant_id": str(p.tenant.pk), "import_id": import_id}
    ).get()
    return result


def _spool_is_empty() -> bool:
    return not any(uploads.spool_dir().iterdir())


def test_an_uploaded_mbox_is_imported_by_the_task_and_followed_by_its_counts(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    messages = [raw_message(subject="zq-subject", message_id=f"<u{i}@x>") for i in range(5)]
    body = _mbox_bytes(tmp_path, [*messages, messages[0], messages[1], GARBAGE])
    client = api_client(alice.user)
    answer = _upload(client, body, account_name="Old mail")
    assert answer.status_code == 200, answer.content
    job = answer.json()
    assert (job["state"], job["account_name"], job["source_name"], job["read"]) == (
        "queued",
        "Old mail",
        "zq-private-name.mbox",
        0,
    )
    run = ImportRun.objects.for_tenant(alice.tenant).get(pk=job["import_id"])
    assert importing.upload_path(run).read_bytes() == body  # stored as the tenant's, under the import's id
    assert "zq-private-name" not in run.upload and _spool_is_empty()

    result = _run(alice, job["import_id"])
    assert (result["imported"], result["duplicates"], result["failed"]) == (5, 2, 1)
    done = post(client, "get_import", {"import_id": job["import_id"]}).json()
    assert (done["state"], done["total"], done["read"], done["imported"], done["duplicates"], done["failed"]) == (
        "done",
        8,
        8,
        5,
        2,
        1,
    )
    [failure] = done["failures"]
    assert failure["position"].startswith("mbox:#8") and failure["reason"] and "junk" not in failure["reason"]
    assert not importing.upload_path(run).exists()  # the upload goes when its import ends
    listed = post(client, "list_imports", {}).json()["imports"]
    assert [i["import_id"] for i in listed] == [job["import_id"]]

    # the audit says who uploaded how much and the counts, never the file's name or its mail
    events = AuditEvent.objects.for_tenant(alice.tenant).filter(operation__in=["upload_import", "import_mail"])
    assert [(e.operation, e.outcome) for e in events.order_by("seq")] == [
        ("upload_import", "ok"),
        ("import_mail", "ok"),
    ]
    text = json.dumps(list(events.values()), default=str)
    assert "zq-private-name" not in text and "zq-subject" not in text

    # mallory: nothing of it, by listing or by id, through the door or the task
    other = api_client(mallory.user)
    assert post(other, "list_imports", {}).json() == {"imports": [], "next_cursor": None}
    refused = post(other, "get_import", {"import_id": job["import_id"]})
    assert refused.status_code == 404 and error_of(refused)["field"] == "import_id"
    assert _run(mallory, job["import_id"])["error"]["code"] == "NOT_FOUND"
    assert not Message.objects.for_tenant(mallory.tenant).exists()
    assert ImportRun.objects.for_tenant(alice.tenant).get(pk=job["import_id"]).state == "done"


def test_an_upload_over_the_bound_is_refused_and_audited_and_nothing_stays(
    alice: Person, mallory: Person, settings: Settings, tmp_path: Path
) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "IMPORT_UPLOAD_MAX_BYTES": 2048}
    answer = _upload(api_client(alice.user), b"From x\n" + b"a" * 5000)
    assert answer.status_code == 413
    error = error_of(answer)
    assert (error["code"], error["field"]) == ("LIMIT_EXCEEDED", "size") and "2048" in error["message"]
    assert _spool_is_empty() and not ImportRun.objects.for_tenant(alice.tenant).exists()
    [event] = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="upload_import")
    assert event.outcome == "LIMIT_EXCEEDED"
    assert not AuditEvent.objects.for_tenant(mallory.tenant).filter(operation="upload_import").exists()


def test_a_stream_past_the_bound_is_stopped_as_it_passes_it(settings: Settings, db: None) -> None:
    """Without a Content-Length (a chunked body), the bytes are counted while they are written."""

    class Endless(io.RawIOBase):
        handed = 0

        def read(self, size: int = -1) -> bytes:
            self.handed += size
            return b"x" * size

    stream = Endless()
    with pytest.raises(uploads.UploadTooLargeError) as info:
        uploads.spool(stream, 10_000)
    assert info.value.size == 10_001 and stream.handed == 10_001  # not a byte more was asked for
    assert _spool_is_empty()
    token, size = uploads.spool(io.BytesIO(b"y" * 10_000), 10_000)
    assert size == 10_000 and uploads.spooled(token) is not None
    uploads.discard(token)
    assert uploads.spooled("../../etc/passwd") is None


def _headers_only(live_server: Any, client: Client, length: int, tenant: object = None) -> str:
    """The live server's answer to an upload's headers alone, its body never sent: an answer that waited for
    the body would time out here."""
    cookies = "; ".join(f"{name}={morsel.value}" for name, morsel in client.cookies.items())
    address = urlsplit(live_server.url)
    tenant_header = f"Oaken-Tenant: {tenant}\r\n" if tenant is not None else ""
    request = (
        f"POST {UPLOAD}?filename=big.mbox HTTP/1.1\r\nHost: {address.netloc}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {length}\r\n{tenant_header}"
        f"X-CSRFToken: {client.defaults['HTTP_X_CSRFTOKEN']}\r\nCookie: {cookies}\r\n\r\n"
    )
    with socket.create_connection((address.hostname, address.port), timeout=20) as conn:
        conn.sendall(request.encode())
        answer = ""
        while "}}" not in answer:  # the whole answer (its JSON body ends the error shape)
            chunk = conn.recv(65536).decode()
            assert chunk, answer
            answer += chunk
    return answer


@pytest.mark.django_db(transaction=True)
def test_a_declared_length_over_the_bound_is_answered_before_the_body_is_sent(
    alice: Person, mallory: Person, live_server: Any
) -> None:
    from django.conf import settings as django_settings

    limit = django_settings.OPERATIONS["IMPORT_UPLOAD_MAX_BYTES"]
    answer = _headers_only(live_server, api_client(alice.user), limit + 1)
    assert answer.startswith("HTTP/1.1 413"), answer[:200]
    assert '"LIMIT_EXCEEDED"' in answer and '"size"' in answer
    assert not ImportRun.objects.for_tenant(alice.tenant).exists()
    assert not AuditEvent.objects.for_tenant(mallory.tenant).filter(operation="upload_import").exists()


@pytest.mark.django_db(transaction=True)
def test_a_person_who_may_not_upload_is_refused_before_the_body_is_sent(
    alice: Person, mallory: Person, live_server: Any
) -> None:
    bob = member_of(alice)
    answer = _headers_only(live_server, api_client(bob.user), 50_000, tenant=alice.tenant.pk)
    assert answer.startswith("HTTP/1.1 403"), answer[:200]
    assert '"FORBIDDEN"' in answer
    [event] = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="upload_import")
    assert event.outcome == "FORBIDDEN"
    assert not ImportRun.objects.for_tenant(alice.tenant).exists()
    assert not AuditEvent.objects.for_tenant(mallory.tenant).filter(operation="upload_import").exists()


def test_a_zip_of_mbox_and_eml_files_is_imported(alice: Person, mallory: Person, tmp_path: Path) -> None:
    mbox = _mbox_bytes(tmp_path, [raw_message(message_id=f"<z{i}@x>") for i in range(3)])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("export/All mail.mbox", mbox)
        archive.writestr("export/one.eml", raw_message(message_id="<e1@x>"))
        archive.writestr("export/two.EML", raw_message(message_id="<z0@x>"))  # already in the mbox
        archive.writestr("__MACOSX/export/._one.eml", b"resource fork")
        archive.writestr("export/notes.txt", b"not mail at all")
    client = api_client(alice.user)
    job = _upload(client, buffer.getvalue(), filename="takeout.zip").json()
    assert job["source_kind"] == "zip"
    result = _run(alice, job["import_id"])
    # the resource fork and the text file are not mail: counted and named as failed, never skipped unsaid
    assert (result["imported"], result["duplicates"], result["failed"]) == (4, 1, 2)
    done = post(client, "get_import", {"import_id": job["import_id"]}).json()
    assert (done["total"], done["read"]) == (7, 7)
    assert {f["position"] for f in done["failures"]} == {"zip:__MACOSX/export/._one.eml", "zip:export/notes.txt"}
    assert not Message.objects.for_tenant(mallory.tenant).exists()


def test_zip_entries_that_climb_out_or_hide_are_counted_and_named_as_failed(alice: Person, mallory: Person) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mail/one.eml", raw_message(message_id="<ok1@x>"))
        archive.writestr("mail/two.eml", raw_message(message_id="<ok2@x>"))
        archive.writestr("../zq-escape.eml", raw_message(message_id="<bad1@x>"))
        archive.writestr("mail/.zq-hidden.eml", raw_message(message_id="<bad2@x>"))
        archive.writestr(".zq-dotdir/three.eml", raw_message(message_id="<bad3@x>"))
    client = api_client(alice.user)
    job = _upload(client, buffer.getvalue(), filename="five.zip").json()
    result = _run(alice, job["import_id"])
    assert (result["imported"], result["duplicates"], result["failed"]) == (2, 0, 3)
    done = post(client, "get_import", {"import_id": job["import_id"]}).json()
    assert (done["total"], done["read"], done["failed"]) == (5, 5, 3)  # "total 2, failed 0" before
    # the person sees their own file's entries named in their own report, with why
    reasons = {f["position"]: f["reason"] for f in done["failures"]}
    assert reasons == {
        "zip:../zq-escape.eml": "a path with '..' or from the root, not read",
        "zip:mail/.zq-hidden.eml": "hidden file or folder (its name starts with a dot), not read",
        "zip:.zq-dotdir/three.eml": "hidden file or folder (its name starts with a dot), not read",
    }
    assert set(Message.objects.for_tenant(alice.tenant).values_list("message_id", flat=True)) == {"ok1@x", "ok2@x"}
    # never in the audit: the entries' names are what the uploader typed
    events = AuditEvent.objects.for_tenant(alice.tenant).filter(operation__in=["upload_import", "import_mail"])
    assert events.count() == 2 and "zq-" not in json.dumps(list(events.values()), default=str)
    # the other tenant: nothing of it
    other = api_client(mallory.user)
    refused = post(other, "get_import", {"import_id": job["import_id"]})
    assert refused.status_code == 404 and error_of(refused)["field"] == "import_id"
    assert not Message.objects.for_tenant(mallory.tenant).exists()


def test_a_file_that_is_no_mail_is_refused_naming_the_file(alice: Person, mallory: Person) -> None:
    answer = _upload(api_client(alice.user), b"just some text, no mail here\n", filename="notes.txt")
    assert answer.status_code == 400
    assert error_of(answer)["field"] == "file"
    assert _spool_is_empty() and not ImportRun.objects.for_tenant(alice.tenant).exists()
    assert not ImportRun.objects.for_tenant(mallory.tenant).exists()


def test_an_import_whose_task_crashes_ends_failed_with_a_reason(
    alice: Person, mallory: Person, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = api_client(alice.user)
    job = _upload(client, _mbox_bytes(tmp_path, [raw_message()])).json()

    def broken(path: Path) -> int:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(importing, "count_messages", broken)
    assert _run(alice, job["import_id"])["error"]["code"] == "INTERNAL_ERROR"
    failed = post(client, "get_import", {"import_id": job["import_id"]}).json()
    assert (failed["state"], failed["error"]) == ("failed", "RuntimeError")
    assert failed["finished_at"] is not None
    run = ImportRun.objects.for_tenant(alice.tenant).get(pk=job["import_id"])
    assert not importing.upload_path(run).exists()
    # run again (a redelivered task): refused, and the import stays as it ended
    again = _run(alice, job["import_id"])
    assert again["error"]["code"] == "CONFLICT"
    assert ImportRun.objects.for_tenant(alice.tenant).get(pk=job["import_id"]).error == "RuntimeError"
    assert not ImportRun.objects.for_tenant(mallory.tenant).exists()


def test_uploading_is_an_admins_and_never_an_agents(alice: Person, mallory: Person) -> None:
    from tests.callers import as_agent

    with pytest.raises(OakenError) as info:
        call(as_agent(alice, scopes={"read", "write", "send"}), "list_imports", {})
    assert info.value.code == "NOT_AVAILABLE"
    with pytest.raises(OakenError) as info:
        call_internal(alice.tenant, "upload_import", {"size": 1, "filename": "x.mbox"})
    assert info.value.code in {"NOT_AVAILABLE", "FORBIDDEN"}
    assert call(as_person(alice), "list_imports", {}) == {"imports": [], "next_cursor": None}
    assert call(as_person(mallory), "list_imports", {}) == {"imports": [], "next_cursor": None}
    # a member who is no admin: refused, and the file does not stay
    bob = member_of(alice)
    answer = _upload(api_client(bob.user), b"From x\n\nhello\n", tenant=alice.tenant.pk)
    assert answer.status_code == 403 and error_of(answer)["code"] == "FORBIDDEN"
    assert _spool_is_empty() and not ImportRun.objects.for_tenant(alice.tenant).exists()


def test_an_import_whose_worker_was_lost_is_swept_failed_and_a_moving_one_is_not(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from apps.mail.tasks import sweep_stale_imports_task

    client = api_client(alice.user)
    lost, waiting, moving = (_upload(client, _mbox_bytes(tmp_path, [raw_message()], f"{n}.mbox")).json() for n in "abc")
    theirs = _upload(api_client(mallory.user), _mbox_bytes(tmp_path, [raw_message()], "m.mbox")).json()
    long_ago = timezone.now() - timedelta(hours=2)
    ImportRun.objects.for_tenant(alice.tenant).filter(pk=lost["import_id"]).update(state="running", updated_at=long_ago)
    ImportRun.objects.for_tenant(alice.tenant).filter(pk=waiting["import_id"]).update(updated_at=long_ago)
    ImportRun.objects.for_tenant(alice.tenant).filter(pk=moving["import_id"]).update(state="running")
    orphan, _ = uploads.spool(io.BytesIO(b"From x\n\nleft by a killed request\n"), 1000)
    fresh, _ = uploads.spool(io.BytesIO(b"From x\n\nbeing uploaded now\n"), 1000)
    old = time.time() - 7200
    os.utime(uploads.spool_dir() / orphan, (old, old))
    assert sweep_stale_imports_task.apply().get() == 2
    assert uploads.spooled(orphan) is None and uploads.spooled(fresh) is not None
    uploads.discard(fresh)
    states = {
        row["import_id"]: (row["state"], row["error"]) for row in post(client, "list_imports", {}).json()["imports"]
    }
    assert states == {
        lost["import_id"]: ("failed", "worker_lost"),
        waiting["import_id"]: ("failed", "never_started"),
        moving["import_id"]: ("running", ""),
    }
    run = ImportRun.objects.for_tenant(alice.tenant).get(pk=lost["import_id"])
    assert not importing.upload_path(run).exists()
    # a copy of a task that is still running leaves it running (a redelivered task)
    assert _run(alice, moving["import_id"])["error"]["code"] == "CONFLICT"
    assert ImportRun.objects.for_tenant(alice.tenant).get(pk=moving["import_id"]).state == "running"
    assert ImportRun.objects.for_tenant(mallory.tenant).get(pk=theirs["import_id"]).state == "queued"


def test_an_upload_goes_into_the_workspace_named_and_never_another_tenants(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    from apps.workspaces.models import Workspace

    ours = Workspace.objects.create(tenant=alice.tenant, name="archive")
    theirs = Workspace.objects.create(tenant=mallory.tenant, name="archive")
    client = api_client(alice.user)
    body = _mbox_bytes(tmp_path, [raw_message()])
    job = _upload(client, body, workspace_id=str(ours.pk)).json()
    assert ImportRun.objects.for_tenant(alice.tenant).get(pk=job["import_id"]).account.workspace == ours
    refused = _upload(client, body, workspace_id=str(theirs.pk))
    assert refused.status_code == 404 and error_of(refused)["field"] == "workspace_id"
    assert ImportRun.objects.for_tenant(alice.tenant).count() == 1 and _spool_is_empty()
    assert not ImportRun.objects.for_tenant(mallory.tenant).exists()


def _runs(p: Person, count: int, name: str) -> list[str]:
    """`count` finished imports into a local account of p's, a second apart (some at the same second), newest
    first as list_imports orders them."""
    from datetime import timedelta

    from django.utils import timezone

    account = importing.ensure_local_account(tenant=p.tenant, workspace=p.workspace, name=name)
    base = timezone.now() - timedelta(hours=1)
    made = [
        ImportRun.objects.create(
            tenant=p.tenant,
            account=account,
            source_name=f"{name}-{i}.mbox",
            source_kind="mbox",
            state="done",
            started_at=base + timedelta(seconds=i // 2),
        )
        for i in range(count)
    ]
    return [str(r.pk) for r in sorted(made, key=lambda r: (r.started_at, r.pk), reverse=True)]


def test_list_imports_pages_by_cursor_and_never_crosses_tenants(alice: Person, mallory: Person) -> None:
    mine, hers = _runs(alice, 7, "Archive"), _runs(mallory, 3, "Hers")
    me, her = as_person(alice), as_person(mallory)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = call(me, "list_imports", {"limit": 3, **({"cursor": cursor} if cursor else {})})
        assert len(page["imports"]) <= 3
        seen += [i["import_id"] for i in page["imports"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == mine and pages == 3  # every import once, newest first, ties at one second kept apart by id
    # alice's cursor in mallory's hands names a position, never alice's imports: mallory sees only her own
    second = call(me, "list_imports", {"limit": 3})["next_cursor"]
    theirs = call(her, "list_imports", {"limit": 3, "cursor": second})
    assert set(i["import_id"] for i in theirs["imports"]) <= set(hers)
    assert [i["import_id"] for i in call(her, "list_imports", {})["imports"]] == hers
    # a forged cursor and a limit over the bound: refused, naming the field, never repeating the value
    for bad in ("not-a-cursor", "WyJ4Il0="):
        with pytest.raises(OakenError) as info:
            call(me, "list_imports", {"cursor": bad})
        assert (info.value.code, info.value.field) == ("INVALID_INPUT", "cursor") and bad not in info.value.message
    with pytest.raises(OakenError) as info:
        call(me, "list_imports", {"limit": 10_000})
    assert (info.value.code, info.value.field) == ("LIMIT_EXCEEDED", "limit")
