"""Importing goes through the gate (`import_mail`): an ADMIN's, from the server's own side only, audited with
counts and never the path or the mail; the task in the worker is checked and audited the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker

from apps.audit.models import AuditEvent
from apps.core.errors import OakenError
from apps.core.kinds import Door
from apps.gate.dispatch import dispatch
from apps.gate.internal import call_internal
from apps.mail.models import ImportRun, MailAccount, Message
from apps.operations.exposure import offered_operations
from apps.worker.tasks import import_mail_task
from apps.workspaces.models import Workspace
from config.celery import app
from tests.callers import as_agent, as_person, joined
from tests.commands import run_json
from tests.conftest import Person
from tests.mailfactory import raw_message, write_mbox
from tests.test_rest_door import api_client, error_of, post

SUBJECT = "Quarterly zq-subject"
BODY = "the zq-body-text of the letter\n"


def _source(tmp_path: Path, name: str = "zq-private-name.mbox") -> Path:
    folder = tmp_path / "zq-secret-folder"
    folder.mkdir(exist_ok=True)
    return write_mbox(
        folder / name,
        [
            raw_message(subject=SUBJECT, body=BODY, sender="Zq Sender <zq-sender@example.test>", message_id="<a@x>"),
            raw_message(subject="Second", body="more zq-body-text\n", message_id="<b@x>"),
        ],
    )


def _cli(*args: str) -> tuple[int, Any]:
    return run_json("import_mail", *args)


def _events(p: Person) -> list[AuditEvent]:
    return list(AuditEvent.objects.for_tenant(p.tenant).filter(operation="import_mail").order_by("seq"))


def _row_text(event: AuditEvent) -> str:
    """Every stored field of the event's row, as one text."""
    row = AuditEvent.objects.for_tenant(event.tenant).filter(pk=event.pk).values().get()
    return json.dumps(row, default=str)


def _assert_no_path_or_mail(event: AuditEvent, source: Path) -> None:
    text = _row_text(event)
    for secret in (
        str(source),
        source.name,
        "zq-private-name",
        "zq-secret-folder",
        "zq-subject",
        "zq-body-text",
        "zq-sender",
        "Quarterly",
    ):
        assert secret not in text, secret


def test_oaken_import_mail_leaves_one_event_with_counts_only(alice: Person, mallory: Person, tmp_path: Path) -> None:
    source = _source(tmp_path)
    code, result = _cli(str(source), "--user", alice.user.email, "--account", "Archive")
    assert code == 0 and (result["imported"], result["duplicates"], result["failed"]) == (2, 0, 0)
    [event] = AuditEvent.objects.for_tenant(alice.tenant)
    assert (event.operation, event.outcome, event.door, event.principal, event.person_id) == (
        "import_mail",
        "ok",
        "cli",
        "person",
        alice.user.pk,
    )
    assert event.targets == [
        {
            "id": result["import_id"],
            "before": None,
            "after": {"account_id": result["account_id"], "imported": 2, "duplicates": 0, "failed": 0},
        }
    ]
    assert len(event.input_digest) == 64  # the input is digested, never stored
    _assert_no_path_or_mail(event, source)
    # again: the duplicates are counted in the second event, which carries no more than the first
    code, again = _cli(str(source), "--user", alice.user.email, "--account", "Archive")
    assert code == 0 and (again["imported"], again["duplicates"]) == (0, 2)
    second = _events(alice)[1]
    assert second.targets[0]["after"] == {
        "account_id": result["account_id"],
        "imported": 0,
        "duplicates": 2,
        "failed": 0,
    }
    _assert_no_path_or_mail(second, source)
    assert not AuditEvent.objects.for_tenant(mallory.tenant).exists()
    assert not Message.objects.for_tenant(mallory.tenant).exists()


def test_a_member_is_refused_and_the_refusal_is_audited(alice: Person, mallory: Person, tmp_path: Path) -> None:
    """Importing makes or fills a mail account: an ADMIN's work, as connecting a mailbox is."""
    source = _source(tmp_path)
    bob = joined(alice, "bob@example.test", "MEMBER")
    code, refused = _cli(str(source), "--user", bob.user.email, "--tenant", str(alice.tenant.pk))
    assert code == 1
    assert refused["error"] == {"code": "FORBIDDEN", "message": "this needs the ADMIN role in this tenant"}
    [event] = _events(alice)
    assert (event.outcome, event.door, event.person_id, event.targets) == ("FORBIDDEN", "cli", bob.user.pk, [])
    _assert_no_path_or_mail(event, source)
    assert not MailAccount.objects.for_tenant(alice.tenant).exists()
    assert not ImportRun.objects.for_tenant(alice.tenant).exists()
    # an ADMIN may
    carol = joined(alice, "carol@example.test", "ADMIN")
    code, result = _cli(str(source), "--user", carol.user.email, "--tenant", str(alice.tenant.pk))
    assert code == 0 and result["imported"] == 2
    assert Message.objects.for_tenant(alice.tenant).count() == 2
    assert not Message.objects.for_tenant(mallory.tenant).exists()


def test_another_tenants_workspace_is_not_found_by_name_or_id(alice: Person, mallory: Person, tmp_path: Path) -> None:
    source = _source(tmp_path)
    Workspace.objects.create(tenant=alice.tenant, name="work")
    code, refused = _cli(str(source), "--user", mallory.user.email, "--workspace", "work")
    assert code == 1 and refused["error"] == {
        "code": "NOT_FOUND",
        "message": "workspace: no such item",
        "field": "workspace",
    }
    for workspace_id in (str(alice.workspace.pk), "not-an-id"):
        with pytest.raises(OakenError) as info:
            dispatch(as_person(mallory), Door.CLI, "import_mail", {"path": str(source), "workspace_id": workspace_id})
        assert (info.value.code, info.value.field) == ("NOT_FOUND", "workspace_id")
    assert [e.outcome for e in _events(mallory)] == ["NOT_FOUND"] * 3
    assert not AuditEvent.objects.for_tenant(alice.tenant).exists()
    assert not MailAccount.objects.for_tenant(alice.tenant).exists()
    assert not MailAccount.objects.for_tenant(mallory.tenant).exists()
    # her own workspace by id is hers to import into; naming it twice over is refused
    result = dispatch(
        as_person(mallory), Door.CLI, "import_mail", {"path": str(source), "workspace_id": str(mallory.workspace.pk)}
    ).output
    assert result["imported"] == 2
    with pytest.raises(OakenError) as info:
        dispatch(
            as_person(mallory),
            Door.CLI,
            "import_mail",
            {"path": str(source), "workspace": "default", "workspace_id": str(mallory.workspace.pk)},
        )
    assert (info.value.code, info.value.field) == ("INVALID_INPUT", "workspace_id")


def test_the_path_is_checked_and_never_repeated(alice: Person, tmp_path: Path) -> None:
    empty = tmp_path / "zq-empty-folder"
    empty.mkdir()
    not_mail = tmp_path / "zq-notes.txt"
    not_mail.write_text("just some notes\n")
    for path in (str(empty), str(not_mail), str(tmp_path / "zq-missing"), "zq-relative/box.mbox", "/zq\x00nul"):
        with pytest.raises(OakenError) as info:
            dispatch(as_person(alice), Door.CLI, "import_mail", {"path": path})
        assert (info.value.code, info.value.field) == ("INVALID_INPUT", "path")
        assert "zq" not in json.dumps(info.value.as_dict())
    # the command makes a relative path absolute as its shell means it: the answer does not repeat it either
    code, refused = _cli("zq-relative/box.mbox", "--user", alice.user.email)
    assert code == 1 and refused["error"]["field"] == "path" and "zq" not in json.dumps(refused)
    assert [e.outcome for e in _events(alice)] == ["INVALID_INPUT"] * 6
    assert all("zq" not in _row_text(e) for e in _events(alice))
    assert not MailAccount.objects.for_tenant(alice.tenant).exists()


def test_no_door_over_the_network_may_name_a_server_file(alice: Person, mallory: Person, tmp_path: Path) -> None:
    source = _source(tmp_path)
    response = post(api_client(alice.user), "import_mail", {"path": str(source)})
    assert response.status_code == 404 and error_of(response)["code"] == "NOT_AVAILABLE"
    with pytest.raises(OakenError) as info:
        dispatch(as_person(alice), Door.UI, "import_mail", {"path": str(source)})
    assert info.value.code == "NOT_AVAILABLE"
    with pytest.raises(OakenError) as info:
        dispatch(as_agent(alice, scopes={"read", "write", "send"}), Door.MCP, "import_mail", {"path": str(source)})
    assert info.value.code == "NOT_AVAILABLE"
    assert "import_mail" not in {op.name for op in offered_operations(as_person(alice))}
    assert "import_mail" not in {op.name for op in offered_operations(as_person(alice), door=Door.UI)}
    assert "import_mail" in {op.name for op in offered_operations(as_person(alice), door=Door.CLI)}
    assert not Message.objects.for_tenant(alice.tenant).exists()
    assert not AuditEvent.objects.for_tenant(mallory.tenant).exists()


def test_the_system_imports_on_the_internal_door(alice: Person, mallory: Person, tmp_path: Path) -> None:
    source = _source(tmp_path)
    result = call_internal(
        alice.tenant, "import_mail", {"path": str(source), "workspace_id": str(alice.workspace.pk)}
    ).output
    assert result["imported"] == 2
    [event] = _events(alice)
    assert (event.principal, event.door, event.outcome, event.person_id) == ("internal", "internal", "ok", None)
    assert event.targets[0]["after"]["imported"] == 2
    _assert_no_path_or_mail(event, source)
    with pytest.raises(OakenError) as info:
        call_internal(mallory.tenant, "import_mail", {"path": str(source), "workspace_id": str(alice.workspace.pk)})
    assert info.value.code == "NOT_FOUND"
    assert [e.outcome for e in _events(mallory)] == ["NOT_FOUND"]
    assert not Message.objects.for_tenant(mallory.tenant).exists()


@pytest.mark.django_db(transaction=True)
def test_the_import_task_goes_through_the_gate(alice: Person, mallory: Person, tmp_path: Path) -> None:
    source = _source(tmp_path)
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        counts = import_mail_task.delay(
            tenant_id=str(alice.tenant.pk), workspace_id=str(alice.workspace.pk), account_name="A", path=str(source)
        ).get(timeout=60)
        refused = import_mail_task.delay(
            tenant_id=str(mallory.tenant.pk),
            workspace_id=str(alice.workspace.pk),
            account_name="A",
            path=str(source),
        ).get(timeout=60)
    assert (counts["imported"], counts["duplicates"], counts["failed"]) == (2, 0, 0)
    [event] = _events(alice)
    assert (event.principal, event.door, event.outcome) == ("internal", "internal", "ok")
    assert event.targets[0]["after"] == {
        "account_id": counts["account_id"],
        "imported": 2,
        "duplicates": 0,
        "failed": 0,
    }
    _assert_no_path_or_mail(event, source)
    assert refused == {"error": {"code": "NOT_FOUND", "message": "workspace_id: no such item", "field": "workspace_id"}}
    assert [e.outcome for e in _events(mallory)] == ["NOT_FOUND"]
    assert not Message.objects.for_tenant(mallory.tenant).exists()
