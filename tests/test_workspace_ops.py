"""Workspaces (SPEC §2): listed by members, created and renamed by ADMINs, names checked, other tenants' invisible."""

from __future__ import annotations

import json

import pytest
from pytest_django import Settings

from apps.audit.models import AuditEvent
from apps.mail.models import MailAccount
from apps.workspaces.models import Workspace
from tests.callers import as_agent, as_person, call, joined, refusal
from tests.conftest import Person


def _names(p: Person) -> list[str]:
    return sorted(Workspace.objects.for_tenant(p.tenant).values_list("name", flat=True))


def _create(p: Person, name: str) -> dict[str, object]:
    return call(as_person(p), "create_workspace", {"name": name}, confirm=True)


def test_members_list_their_tenants_workspaces_with_account_counts(alice: Person, mallory: Person) -> None:
    MailAccount.objects.create(tenant=alice.tenant, workspace=alice.workspace, name="inbox one")
    MailAccount.objects.create(tenant=alice.tenant, workspace=alice.workspace, name="inbox two")
    MailAccount.objects.create(tenant=mallory.tenant, workspace=mallory.workspace, name="mallory's")
    _create(alice, "work")
    listed = call(as_person(alice), "list_workspaces")["workspaces"]
    assert [(w["name"], w["mail_accounts"]) for w in listed] == [("default", 2), ("work", 0)]
    assert {w["id"] for w in listed} == {
        str(pk) for pk in Workspace.objects.for_tenant(alice.tenant).values_list("pk", flat=True)
    }
    theirs = call(as_person(mallory), "list_workspaces")["workspaces"]
    assert [(w["name"], w["mail_accounts"]) for w in theirs] == [("default", 1)]


def test_an_admin_creates_a_workspace_after_confirming(alice: Person, mallory: Person) -> None:
    asked = refusal(as_person(alice), "create_workspace", {"name": "work"})
    assert asked.code == "CONFIRMATION_REQUIRED" and asked.proposal is not None
    assert asked.proposal["changes"] == [{"id": "new workspace", "before": None, "after": {"name": "work"}}]
    assert _names(alice) == ["default"]
    created = _create(alice, "work")
    assert created["name"] == "work" and created["mail_accounts"] == 0
    assert _names(alice) == ["default", "work"] and _names(mallory) == ["default"]
    event = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="create_workspace", outcome="ok").get()
    assert event.targets == [{"id": created["id"], "before": None, "after": {"name": "work"}}]


@pytest.mark.parametrize("name", ["", "Work", "my work", "wörk", "a" * 101, "work!", "zq-secret\n"])
def test_workspace_names_are_lowercase_letters_digits_dash_underscore(alice: Person, name: str) -> None:
    refused = refusal(as_person(alice), "create_workspace", {"name": name}, confirm=True)
    assert (refused.code, refused.field) == ("INVALID_INPUT", "name")
    assert "zq-secret" not in json.dumps(refused.as_dict())
    assert _names(alice) == ["default"]


def test_names_are_unique_in_a_tenant_but_not_across_tenants(alice: Person, mallory: Person) -> None:
    _create(alice, "work_2")
    for name in ("work_2", "default"):
        refused = refusal(as_person(alice), "create_workspace", {"name": name}, confirm=True)
        assert (refused.code, refused.field) == ("CONFLICT", "name")
    assert _create(mallory, "work_2")["name"] == "work_2"
    assert _names(alice) == ["default", "work_2"] and _names(mallory) == ["default", "work_2"]


def test_a_tenant_has_a_bounded_number_of_workspaces(alice: Person, settings: Settings) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "WORKSPACES_MAX": 2}
    _create(alice, "two")
    assert refusal(as_person(alice), "create_workspace", {"name": "three"}, confirm=True).code == "LIMIT_EXCEEDED"
    assert _names(alice) == ["default", "two"]


def test_an_admin_renames_a_workspace(alice: Person, mallory: Person) -> None:
    work = _create(alice, "work")
    call(as_person(alice), "create_api_key", {"scopes": ["read"], "workspaces": ["work"]}, confirm=True)
    asked = refusal(as_person(alice), "rename_workspace", {"workspace_id": work["id"], "name": "job"})
    assert asked.proposal is not None
    assert asked.proposal["changes"] == [{"id": work["id"], "before": {"name": "work"}, "after": {"name": "job"}}]
    # in words since issue 37 (the dialog's short list): was "1 API key(s) listing the old name" in the summary
    assert "1 API key listing the old name stops reaching it." in asked.proposal["lines"]
    renamed = call(as_person(alice), "rename_workspace", {"workspace_id": work["id"], "name": "job"}, confirm=True)
    assert renamed == {**work, "name": "job"}
    assert _names(alice) == ["default", "job"] and _names(mallory) == ["default"]


def test_the_default_workspace_keeps_its_name_and_names_stay_unique(alice: Person) -> None:
    work = _create(alice, "work")
    _create(alice, "home")
    refused = refusal(
        as_person(alice), "rename_workspace", {"workspace_id": str(alice.workspace.pk), "name": "main"}, confirm=True
    )
    assert (refused.code, refused.field) == ("INVALID_INPUT", "workspace_id")
    refused = refusal(as_person(alice), "rename_workspace", {"workspace_id": work["id"], "name": "home"}, confirm=True)
    assert (refused.code, refused.field) == ("CONFLICT", "name")
    refused = refusal(as_person(alice), "rename_workspace", {"workspace_id": work["id"], "name": "Home"}, confirm=True)
    assert (refused.code, refused.field) == ("INVALID_INPUT", "name")
    assert _names(alice) == ["default", "home", "work"]


def test_another_tenants_workspace_is_not_found(alice: Person, mallory: Person) -> None:
    theirs = _create(mallory, "secret")
    for workspace_id in (theirs["id"], str(mallory.workspace.pk), "not-an-id"):
        refused = refusal(
            as_person(alice), "rename_workspace", {"workspace_id": workspace_id, "name": "mine"}, confirm=True
        )
        assert (refused.code, refused.field) == ("NOT_FOUND", "workspace_id")
    assert _names(mallory) == ["default", "secret"]


def test_members_list_but_cannot_create_or_rename(alice: Person, mallory: Person) -> None:
    as_bob = as_person(joined(alice, "bob@example.test"))
    work = _create(alice, "work")
    assert [w["name"] for w in call(as_bob, "list_workspaces")["workspaces"]] == ["default", "work"]
    assert refusal(as_bob, "create_workspace", {"name": "bobs"}, confirm=True).code == "FORBIDDEN"
    assert (
        refusal(as_bob, "rename_workspace", {"workspace_id": work["id"], "name": "x"}, confirm=True).code == "FORBIDDEN"
    )
    assert _names(alice) == ["default", "work"] and _names(mallory) == ["default"]


def test_each_workspace_says_whether_the_caller_may_rename_it(alice: Person, mallory: Person) -> None:
    admin = joined(alice, "ada@example.test", "ADMIN")
    bob = joined(alice, "bob@example.test")
    created = _create(alice, "work")
    assert created["renamable"] is True
    _create(mallory, "secret")

    def offered(p: Person) -> list[tuple[str, bool]]:
        return [(w["name"], w["renamable"]) for w in call(as_person(p), "list_workspaces")["workspaces"]]

    assert offered(alice) == offered(admin) == [("default", False), ("work", True)]  # `default` keeps its name
    assert offered(bob) == [("default", False), ("work", False)]  # a MEMBER renames nothing
    assert offered(mallory) == [("default", False), ("secret", True)]
    # exactly what rename_workspace allows: asked without confirming, it proposes or refuses
    for p in (alice, admin, bob):
        for w in call(as_person(p), "list_workspaces")["workspaces"]:
            asked = refusal(as_person(p), "rename_workspace", {"workspace_id": w["id"], "name": "renamed"})
            assert (asked.code == "CONFIRMATION_REQUIRED") == w["renamable"], (p.user.email, w["name"], asked.code)
    assert _names(alice) == ["default", "work"] and _names(mallory) == ["default", "secret"]


def test_agents_are_never_offered_tenant_administration(alice: Person) -> None:
    agent = as_agent(alice, scopes={"send"}, workspaces=())
    for name in (
        "list_workspaces",
        "create_workspace",
        "rename_workspace",
        "list_members",
        "invite_member",
        "cancel_invitation",
        "change_member_role",
        "remove_member",
    ):
        assert refusal(agent, name, {}).code == "NOT_AVAILABLE"
