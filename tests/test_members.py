"""Members and roles (SPEC §2): who may change whom, the last OWNER always stays, other tenants stay invisible."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.db import connection
from oauth2_provider.models import Application

from apps.agents.keys import caller_for_key
from apps.agents.models import ApiKey, Connection
from apps.audit.models import AuditEvent
from apps.core.errors import OakenError
from apps.core.kinds import Door
from apps.gate.dispatch import dispatch
from apps.workspaces.models import Membership, Workspace
from tests.callers import as_person, call, joined, membership, refusal
from tests.conftest import Person


def _role_of(p: Person) -> str | None:
    row = Membership.objects.for_tenant(p.tenant).filter(user=p.user).first()
    return row.role if row is not None else None


def _id(p: Person) -> str:
    return str(membership(p).pk)


def _set_role(by: Person, whom: Person, role: str) -> dict[str, Any]:
    return call(as_person(by), "change_member_role", {"membership_id": _id(whom), "role": role}, confirm=True)


def _role_refusal(by: Person, whom: Person, role: str) -> OakenError:
    return refusal(as_person(by), "change_member_role", {"membership_id": _id(whom), "role": role}, confirm=True)


def _remove(by: Person, whom: Person) -> dict[str, Any]:
    return call(as_person(by), "remove_member", {"membership_id": _id(whom)}, confirm=True)


def _remove_refusal(by: Person, whom: Person) -> OakenError:
    return refusal(as_person(by), "remove_member", {"membership_id": _id(whom)}, confirm=True)


# ---------------------------------------------------------------- listing


def test_members_see_the_members_and_admins_also_the_invitations(alice: Person, mallory: Person) -> None:
    bob = joined(alice, "bob@example.test")
    call(as_person(alice), "invite_member", {"email": "carol@example.test"}, confirm=True)
    call(as_person(mallory), "invite_member", {"email": "dave@example.test"}, confirm=True)

    seen = call(as_person(bob), "list_members")
    assert [(m["email"], m["role"], m["you"]) for m in seen["members"]] == [
        ("alice@example.test", "OWNER", False),
        ("bob@example.test", "MEMBER", True),
    ]
    assert seen["invitations"] is None  # a MEMBER does not see who is invited

    seen = call(as_person(alice), "list_members")
    assert [m["you"] for m in seen["members"]] == [True, False]
    assert [(i["email"], i["role"], i["invited_by"], i["expired"]) for i in seen["invitations"]] == [
        ("carol@example.test", "MEMBER", "alice@example.test", False)
    ]
    text = json.dumps(seen)
    assert "mallory" not in text and "dave" not in text
    assert [m["email"] for m in call(as_person(mallory), "list_members")["members"]] == ["mallory@example.test"]


EVERY_ROLE = ["MEMBER", "ADMIN", "OWNER"]


def _offered(p: Person) -> dict[str, tuple[list[str], bool]]:
    """What list_members tells `p` they may do to each member: (assignable_roles, can_remove), by address."""
    rows = call(as_person(p), "list_members")["members"]
    return {m["email"]: (m["assignable_roles"], m["can_remove"]) for m in rows}


def test_each_member_row_says_what_the_caller_may_do_to_it(alice: Person, mallory: Person) -> None:
    admin = joined(alice, "ada@example.test", "ADMIN")
    bob = joined(alice, "bob@example.test")
    joined(mallory, "mel@example.test", "ADMIN")
    # an OWNER may give anyone any role and remove anyone (the last OWNER leaving is refused as LAST_OWNER)
    assert _offered(alice) == {
        "alice@example.test": (EVERY_ROLE, True),
        "ada@example.test": (EVERY_ROLE, True),
        "bob@example.test": (EVERY_ROLE, True),
    }
    # an ADMIN moves people between MEMBER and ADMIN, and leaves OWNERs alone
    assert _offered(admin) == {
        "alice@example.test": ([], False),
        "ada@example.test": (["MEMBER", "ADMIN"], True),
        "bob@example.test": (["MEMBER", "ADMIN"], True),
    }
    # a MEMBER changes nobody's role and may only leave
    assert _offered(bob) == {
        "alice@example.test": ([], False),
        "ada@example.test": ([], False),
        "bob@example.test": ([], True),
    }
    assert _offered(mallory) == {"mallory@example.test": (EVERY_ROLE, True), "mel@example.test": (EVERY_ROLE, True)}


def test_the_rows_offer_exactly_what_the_operations_allow(alice: Person, mallory: Person) -> None:
    admin = joined(alice, "ada@example.test", "ADMIN")
    bob = joined(alice, "bob@example.test")
    people = {p.user.email: p for p in (alice, admin, bob)}
    # the last OWNER's own demotion or leaving is offered, and refused with the reason when tried
    allowed = {"CONFIRMATION_REQUIRED", "LAST_OWNER"}
    for caller in people.values():
        for email, (roles, removable) in _offered(caller).items():
            target = {"membership_id": _id(people[email])}
            for role in EVERY_ROLE:
                asked = refusal(as_person(caller), "change_member_role", {**target, "role": role})
                assert (asked.code in allowed) == (role in roles), (caller.user.email, email, role, asked.code)
            asked = refusal(as_person(caller), "remove_member", target)
            assert (asked.code in allowed) == removable, (caller.user.email, email, asked.code)
    assert (_role_of(alice), _role_of(admin), _role_of(bob)) == ("OWNER", "ADMIN", "MEMBER")
    assert _role_of(mallory) == "OWNER"


# ---------------------------------------------------------------- roles


def test_an_admin_promotes_and_demotes_between_member_and_admin(alice: Person, mallory: Person) -> None:
    admin = joined(alice, "ada@example.test", "ADMIN")
    bob = joined(alice, "bob@example.test")
    asked = refusal(as_person(admin), "change_member_role", {"membership_id": _id(bob), "role": "ADMIN"})
    assert asked.proposal is not None
    assert asked.proposal["changes"] == [
        {"id": _id(bob), "before": {"person": "bob@example.test", "role": "MEMBER"}, "after": {"role": "ADMIN"}}
    ]
    assert _role_of(bob) == "MEMBER"
    changed = _set_role(admin, bob, "ADMIN")
    assert (changed["email"], changed["role"]) == ("bob@example.test", "ADMIN") and _role_of(bob) == "ADMIN"
    _set_role(admin, bob, "MEMBER")
    assert _role_of(bob) == "MEMBER"
    event = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="change_member_role", outcome="ok").last()
    assert event is not None and event.targets == [
        {"id": _id(bob), "before": {"role": "ADMIN"}, "after": {"role": "MEMBER"}}
    ]
    assert not AuditEvent.objects.for_tenant(mallory.tenant).filter(operation="change_member_role").exists()


def test_only_an_owner_makes_or_unmakes_owners(alice: Person, mallory: Person) -> None:
    admin = joined(alice, "ada@example.test", "ADMIN")
    bob = joined(alice, "bob@example.test")
    for whom in (bob, admin):  # an ADMIN cannot mint an OWNER, not even themselves
        refused = _role_refusal(admin, whom, "OWNER")
        assert (refused.code, refused.field) == ("FORBIDDEN", "role")
    refused = _role_refusal(admin, alice, "MEMBER")
    assert (refused.code, refused.field) == ("FORBIDDEN", "membership_id")
    assert (_role_of(alice), _role_of(admin), _role_of(bob)) == ("OWNER", "ADMIN", "MEMBER")

    _set_role(alice, bob, "OWNER")
    assert _role_of(bob) == "OWNER"
    _set_role(bob, alice, "ADMIN")  # an OWNER unmakes another
    assert (_role_of(alice), _role_of(bob)) == ("ADMIN", "OWNER")
    assert _role_of(mallory) == "OWNER"


def test_a_member_changes_no_roles(alice: Person) -> None:
    bob = joined(alice, "bob@example.test")
    carol = joined(alice, "carol@example.test")
    for whom, role in ((carol, "ADMIN"), (bob, "ADMIN")):
        assert _role_refusal(bob, whom, role).code == "FORBIDDEN"
    assert (_role_of(bob), _role_of(carol)) == ("MEMBER", "MEMBER")


def test_the_last_owner_cannot_be_demoted(alice: Person, mallory: Person) -> None:
    refused = _role_refusal(alice, alice, "ADMIN")
    assert (refused.code, refused.field) == ("LAST_OWNER", "membership_id")
    assert refused.http_status == 409
    assert _role_of(alice) == "OWNER"
    bob = joined(alice, "bob@example.test", "OWNER")
    _set_role(alice, alice, "ADMIN")  # with a second OWNER, an OWNER may step down
    assert (_role_of(alice), _role_of(bob)) == ("ADMIN", "OWNER")
    assert _role_refusal(bob, bob, "MEMBER").code == "LAST_OWNER"


def test_another_tenants_membership_is_not_found(alice: Person, mallory: Person) -> None:
    bob = joined(alice, "bob@example.test")
    for membership_id in (_id(bob), _id(alice), "0190a9b0-0000-7000-8000-000000000000", "nope"):
        for name, body in (
            ("change_member_role", {"membership_id": membership_id, "role": "OWNER"}),
            ("remove_member", {"membership_id": membership_id}),
        ):
            refused = refusal(as_person(mallory), name, body, confirm=True)
            assert (refused.code, refused.field) == ("NOT_FOUND", "membership_id")
    assert (_role_of(alice), _role_of(bob)) == ("OWNER", "MEMBER")


# ---------------------------------------------------------------- removal


def test_an_admin_removes_a_member_and_their_keys_stop_for_good(alice: Person, mallory: Person) -> None:
    admin = joined(alice, "ada@example.test", "ADMIN")
    bob = joined(alice, "bob@example.test")
    key = str(call(as_person(bob), "create_api_key", {"scopes": ["read"]}, confirm=True)["key"])
    theirs = str(call(as_person(mallory), "create_api_key", {"scopes": ["read"]}, confirm=True)["key"])
    assert caller_for_key(key) is not None

    asked = refusal(as_person(admin), "remove_member", {"membership_id": _id(bob)})
    assert asked.proposal is not None and asked.proposal["count"] == 2  # the membership and the key
    removed = _remove(admin, bob)
    assert (removed["email"], removed["role"]) == ("bob@example.test", "MEMBER")
    assert _role_of(bob) is None and caller_for_key(key) is None
    assert ApiKey.objects.for_tenant(alice.tenant).get(user=bob.user).revoked_at is not None
    # invited back, the old key stays dead
    Membership.objects.create(tenant=alice.tenant, user=bob.user, role="MEMBER")
    assert caller_for_key(key) is None
    assert caller_for_key(theirs) is not None and _role_of(mallory) == "OWNER"


def test_removing_a_member_ends_their_connections_here(alice: Person, mallory: Person) -> None:
    bob = joined(alice, "bob@example.test")
    app = Application.objects.create(
        name="Some assistant",
        client_type="public",
        authorization_grant_type="authorization-code",
        redirect_uris="http://127.0.0.1:5555/cb",
    )

    def grant(p: Person) -> Connection:
        return Connection.objects.create(
            tenant=p.tenant,
            user=p.user,
            application=app,
            client_name="Assistant",
            redirect_uri="http://127.0.0.1:5555/cb",
            scopes=["read"],
        )

    bobs, own, theirs = grant(bob), grant(Person(bob.user, *_own_tenant(bob))), grant(mallory)
    asked = refusal(as_person(alice), "remove_member", {"membership_id": _id(bob)})
    assert asked.proposal is not None and {c["id"] for c in asked.proposal["changes"]} == {_id(bob), str(bobs.pk)}
    _remove(alice, bob)
    ended = Connection.objects.for_tenant(alice.tenant).get(pk=bobs.pk)
    assert ended.revoked_at is not None and ended.revoked_reason == "member_removed"
    # bob's connection in his own tenant, and mallory's, are untouched
    assert Connection.objects.for_tenant(own.tenant).get(pk=own.pk).revoked_at is None
    assert Connection.objects.for_tenant(mallory.tenant).get(pk=theirs.pk).revoked_at is None


def _own_tenant(p: Person) -> tuple[Any, Any]:
    first = Membership.objects.for_user(p.user).exclude(tenant=p.tenant).select_related("tenant").get()
    return first.tenant, Workspace.objects.for_tenant(first.tenant).get()


def test_anyone_may_leave_but_only_admins_remove_others(alice: Person) -> None:
    bob = joined(alice, "bob@example.test")
    carol = joined(alice, "carol@example.test")
    assert _remove_refusal(bob, carol).code == "FORBIDDEN"
    _remove(bob, bob)
    assert _role_of(bob) is None and _role_of(carol) == "MEMBER"
    # once out, bob reaches nothing of this tenant
    with pytest.raises(Membership.DoesNotExist):
        as_person(bob)


def test_an_admin_cannot_remove_an_owner_and_the_last_owner_cannot_leave(alice: Person, mallory: Person) -> None:
    admin = joined(alice, "ada@example.test", "ADMIN")
    refused = _remove_refusal(admin, alice)
    assert (refused.code, refused.field) == ("FORBIDDEN", "membership_id")
    refused = _remove_refusal(alice, alice)
    assert (refused.code, refused.field) == ("LAST_OWNER", "membership_id")
    assert _role_of(alice) == "OWNER"
    bob = joined(alice, "bob@example.test", "OWNER")
    _remove(bob, alice)  # an OWNER removes another OWNER while one stays
    assert _role_of(alice) is None and _role_of(bob) == "OWNER"
    assert _role_of(mallory) == "OWNER"


# ---------------------------------------------------------------- races

OWNERS = 6


def _race(people: list[Person], name: str, body: Any) -> list[str]:
    """Every person makes the same self-directed call at once; the outcome of each ('ok' or a refusal code)."""
    callers = [as_person(p) for p in people]
    bodies = [body(p) for p in people]
    start = threading.Barrier(len(people))
    outcomes: list[str] = []

    def run(i: int) -> None:
        start.wait()
        try:
            dispatch(callers[i], Door.UI, name, bodies[i], confirm=True)
            outcomes.append("ok")
        except OakenError as refused:
            outcomes.append(refused.code)
        except BaseException as exc:  # reported by the assertion
            outcomes.append(repr(exc))
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(people))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(outcomes)


@pytest.mark.django_db(transaction=True)
def test_owners_stepping_down_at_once_leave_exactly_one_owner(alice: Person, mallory: Person) -> None:
    owners = [alice] + [joined(alice, f"owner{i}@example.test", "OWNER") for i in range(1, OWNERS)]
    outcomes = _race(owners, "change_member_role", lambda p: {"membership_id": _id(p), "role": "ADMIN"})
    assert outcomes == ["LAST_OWNER"] + ["ok"] * (OWNERS - 1)
    assert Membership.objects.for_tenant(alice.tenant).filter(role="OWNER").count() == 1
    assert Membership.objects.for_tenant(mallory.tenant).get().role == "OWNER"


@pytest.mark.django_db(transaction=True)
def test_owners_leaving_at_once_leave_exactly_one_owner(alice: Person, mallory: Person) -> None:
    owners = [alice] + [joined(alice, f"owner{i}@example.test", "OWNER") for i in range(1, OWNERS)]
    outcomes = _race(owners, "remove_member", lambda p: {"membership_id": _id(p)})
    assert outcomes == ["LAST_OWNER"] + ["ok"] * (OWNERS - 1)
    assert list(Membership.objects.for_tenant(alice.tenant).values_list("role", flat=True)) == ["OWNER"]
    assert Membership.objects.for_tenant(mallory.tenant).get().role == "OWNER"
