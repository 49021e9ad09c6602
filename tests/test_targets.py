"""An operation's targets: resolved once at the data-scope step, again inside a change's own transaction, and
read by the preview and the handler; the selectors they use ("mine unless ADMIN", live credentials, pages)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from pydantic import BaseModel, ConfigDict

from apps.agents.keys import issue_key
from apps.agents.models import ApiKey
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.core.pages import NOT_A_CURSOR, cut_page, encode_cursor, read_cursor
from apps.core.tenancy import UnscopedQueryError
from apps.mail.importing import import_mail
from apps.mail.models import Message
from apps.mail.selectors import Reach, access_message_by_id
from apps.operations.registry import ALWAYS, Ceiling, OpClass, Preview, operation, registry
from apps.workspaces.models import Membership
from tests.callers import as_agent, as_person, call, joined, membership, refusal
from tests.conftest import Person
from tests.mailfactory import conversation, write_mbox


class MessageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message_id: str


class Seen(BaseModel):
    model_config = ConfigDict(extra="forbid")
    subject: str


def _mail(p: Person, tmp_path: Path) -> str:
    import_mail(
        tenant=p.tenant,
        workspace=p.workspace,
        account_name="A",
        path=write_mbox(tmp_path / f"{p.user.pk}.mbox", conversation(2, prefix=str(p.user.pk))),
    )
    return str(Message.objects.for_tenant(p.tenant).values_list("pk", flat=True).first())


@pytest.fixture
def recording_ops() -> Iterator[list[tuple[str, Any]]]:
    """A read and a mutation whose targets, preview and handler note when they ran and what they saw."""
    seen: list[tuple[str, Any]] = []

    def the_message(ctx: Any, data: MessageIn) -> Message:
        seen.append(("targets", ctx.in_transaction))
        return access_message_by_id(data.message_id, reach=Reach(ctx.tenant, ctx.workspaces))

    def preview(ctx: Any, data: MessageIn) -> Preview:
        seen.append(("preview", ctx.targets.pk))
        return Preview((Change(str(ctx.targets.pk), None, None),))

    def handler(ctx: Any, data: MessageIn) -> Seen:
        seen.append(("handler", ctx.targets.pk))
        return Seen(subject=ctx.targets.subject)

    common: dict[str, Any] = {"summary": "t", "input": MessageIn, "output": Seen, "targets": the_message}
    operation(name="test_read_target", op_class=OpClass.READ, ceiling=Ceiling.ON, **common)(handler)
    operation(
        name="test_change_target",
        op_class=OpClass.MUTATE,
        ceiling=Ceiling.OFF,
        preview=preview,
        confirm=ALWAYS,
        **common,
    )(handler)
    yield seen
    registry.remove("test_read_target")
    registry.remove("test_change_target")


def test_a_read_resolves_its_targets_once_and_the_handler_reads_them(
    alice: Person, mallory: Person, tmp_path: Path, recording_ops: list[tuple[str, Any]]
) -> None:
    message_id = _mail(alice, tmp_path)
    _mail(mallory, tmp_path)
    out = call(as_person(alice), "test_read_target", {"message_id": message_id})
    assert out["subject"] == Message.objects.for_tenant(alice.tenant).get(pk=message_id).subject
    assert [step for step, _ in recording_ops] == ["targets", "handler"]
    assert recording_ops[0] == ("targets", False)


def test_a_change_resolves_its_targets_again_inside_its_own_transaction(
    alice: Person, mallory: Person, tmp_path: Path, recording_ops: list[tuple[str, Any]]
) -> None:
    message_id = _mail(alice, tmp_path)
    _mail(mallory, tmp_path)
    proposed = refusal(as_person(alice), "test_change_target", {"message_id": message_id})
    assert proposed.code == "CONFIRMATION_REQUIRED"
    assert recording_ops == [("targets", False), ("preview", recording_ops[1][1])]
    assert str(recording_ops[1][1]) == message_id
    recording_ops.clear()
    call(as_person(alice), "test_change_target", {"message_id": message_id}, confirm=True)
    # once for the checks, once in the transaction the handler runs in, which works from the second
    assert [entry[0] for entry in recording_ops] == ["targets", "targets", "handler"]
    assert (recording_ops[0][1], recording_ops[1][1]) == (False, True)
    assert str(recording_ops[2][1]) == message_id


def test_another_tenants_target_is_refused_before_the_preview_and_the_handler(
    alice: Person, mallory: Person, tmp_path: Path, recording_ops: list[tuple[str, Any]]
) -> None:
    _mail(alice, tmp_path)
    theirs = _mail(mallory, tmp_path)
    for name in ("test_read_target", "test_change_target"):
        refused = refusal(as_person(alice), name, {"message_id": theirs})
        assert (refused.code, refused.field, refused.proposal) == ("NOT_FOUND", "message_id", None)
    assert [step for step, _ in recording_ops] == ["targets", "targets"]


def test_mine_unless_admin_stays_in_the_actors_tenant(alice: Person, mallory: Person) -> None:
    member = joined(alice, "member@example.test")
    admin = joined(alice, "admin@example.test", role="ADMIN")
    everyone = Membership.objects.for_tenant(alice.tenant)
    assert set(everyone.visible_to(as_person(member)).values_list("user", flat=True)) == {member.user.pk}
    assert set(everyone.visible_to(as_person(admin)).values_list("user", flat=True)) == {
        alice.user.pk,
        member.user.pk,
        admin.user.pk,
    }
    # an ADMIN's "every row" is their own tenant's, even from a query that named none
    assert not Membership.objects.all().visible_to(as_person(admin)).filter(tenant=mallory.tenant).exists()
    with pytest.raises(UnscopedQueryError):
        ApiKey.objects.visible_to(as_person(admin))


def test_a_live_credential_is_neither_revoked_nor_past_its_deadline(alice: Person, mallory: Person) -> None:
    now = timezone.now()

    def key(p: Person, expires: object = None) -> ApiKey:
        return issue_key(membership=membership(p), scopes=["read"], workspaces=[], allow_list=None, expires_at=expires)[
            0
        ]

    live, lasting = key(alice), key(alice, now + timedelta(days=1))
    expired, revoked = key(alice, now - timedelta(seconds=1)), key(alice)
    ApiKey.objects.for_tenant(alice.tenant).filter(pk=revoked.pk).update(revoked_at=now)
    theirs = key(mallory)
    found = set(ApiKey.objects.for_tenant(alice.tenant).live(now).values_list("pk", flat=True))
    assert found == {live.pk, lasting.pk}
    assert expired.pk not in found and theirs.pk not in found
    rows = {row.pk: row for row in ApiKey.objects.for_tenant(alice.tenant)}
    assert {pk for pk, row in rows.items() if row.is_live(now)} == found  # the same rule in Python


def test_a_cursor_round_trips_and_anything_else_is_refused_alike() -> None:
    page, after = cut_page(range(6), 5, lambda n: [n, "x"])
    assert page == [0, 1, 2, 3, 4]
    assert read_cursor(after, 2, lambda n, tag: (n, tag)) == (4, "x")
    assert cut_page(range(5), 5, lambda n: [n]) == ([0, 1, 2, 3, 4], None)
    assert read_cursor(None, 2, lambda n, tag: n) is None

    def position(n: object) -> int:
        if not isinstance(n, int):
            raise ValueError("not a position")
        return n

    not_a_list = base64.urlsafe_b64encode(b'{"n": 1}').decode()
    for forged in ("garbage!!", encode_cursor([1, 2]), encode_cursor(["one"]), not_a_list, ""):
        with pytest.raises(OakenError) as refused:
            read_cursor(forged, 1, position)
        assert (refused.value.code, refused.value.field) == ("INVALID_INPUT", "cursor")
        assert refused.value.message == f"cursor: {NOT_A_CURSOR}"


def test_an_agent_meets_the_same_targets(
    alice: Person, mallory: Person, tmp_path: Path, recording_ops: list[tuple[str, Any]]
) -> None:
    message_id = _mail(alice, tmp_path)
    theirs = _mail(mallory, tmp_path)
    assert call(as_agent(alice), "test_read_target", {"message_id": message_id})["subject"]
    assert refusal(as_agent(alice), "test_read_target", {"message_id": theirs}).code == "NOT_FOUND"
