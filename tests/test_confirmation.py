"""Confirmation (SPEC §5): persons confirm; agents get a proposal and a single-use, bound, short-lived token."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from apps.core.errors import OakenError
from apps.core.kinds import Door
from apps.gate.dispatch import dispatch
from apps.gate.models import ConfirmationToken
from apps.mail.importing import import_mail
from apps.mail.models import Message
from tests.callers import as_agent, as_person
from tests.conftest import Person
from tests.mailfactory import conversation, write_mbox


def _mail(p: Person, tmp_path: Path, n: int) -> list[str]:
    import_mail(
        tenant=p.tenant,
        workspace=p.workspace,
        account_name="A",
        path=write_mbox(tmp_path / f"{p.user.pk}.mbox", conversation(n, prefix=str(p.user.pk))),
    )
    return [str(pk) for pk in Message.objects.for_tenant(p.tenant).order_by("date").values_list("pk", flat=True)]


def _trashed(p: Person) -> int:
    return Message.objects.for_tenant(p.tenant).filter(folder__kind="trash").count()


def _ask(caller: object, data: dict[str, object], **kw: object) -> OakenError:
    with pytest.raises(OakenError) as info:
        dispatch(caller, Door.MCP, "trash_messages", data, **kw)  # type: ignore[arg-type]
    return info.value


def test_a_person_confirms_by_asking_for_exactly_this(alice: Person, mallory: Person, tmp_path: Path) -> None:
    ids = _mail(alice, tmp_path, 11)
    with pytest.raises(OakenError) as info:
        dispatch(as_person(alice), Door.UI, "trash_messages", {"message_ids": ids})
    assert info.value.code == "CONFIRMATION_REQUIRED"
    assert info.value.proposal is not None and info.value.proposal["count"] == 11
    assert "token" not in info.value.proposal
    assert _trashed(alice) == 0
    dispatch(as_person(alice), Door.UI, "trash_messages", {"message_ids": ids}, confirm=True)
    assert _trashed(alice) == 11
    assert _mail(mallory, tmp_path, 1) and _trashed(mallory) == 0


def test_small_reversible_changes_need_no_confirmation(alice: Person, tmp_path: Path) -> None:
    ids = _mail(alice, tmp_path, 11)
    dispatch(as_agent(alice), Door.MCP, "trash_messages", {"message_ids": ids[:10]})
    assert _trashed(alice) == 10
    assert _ask(as_agent(alice), {"message_ids": ids}).code == "CONFIRMATION_REQUIRED"


def test_an_agent_gets_a_proposal_then_applies_it_once(alice: Person, mallory: Person, tmp_path: Path) -> None:
    ids = _mail(alice, tmp_path, 11)
    asked = _ask(as_agent(alice), {"message_ids": ids})
    proposal = asked.proposal
    assert proposal is not None
    assert proposal["count"] == 11 and proposal["operation"] == "trash_messages"
    assert {c["id"] for c in proposal["changes"]} == set(ids)
    assert all(c["before"] == {"folder": "inbox"} and c["after"] == {"folder": "trash"} for c in proposal["changes"])
    assert proposal["expires_in"] == 120 and len(proposal["token"]) >= 32
    text = json.dumps(proposal)
    assert "Plans" not in text and "Message 0" not in text  # never mail text
    assert _trashed(alice) == 0

    applied = dispatch(
        as_agent(alice), Door.MCP, "trash_messages", {"message_ids": ids}, confirmation_token=proposal["token"]
    )
    assert applied.output["changed"] == 11 and _trashed(alice) == 11
    replay = _ask(as_agent(alice), {"message_ids": ids}, confirmation_token=proposal["token"])
    assert replay.code == "CONFIRMATION_INVALID"
    # mallory holds no token and her mail is untouched
    assert _mail(mallory, tmp_path, 1) and _trashed(mallory) == 0


def test_tokens_are_stored_only_as_a_hash(alice: Person, tmp_path: Path) -> None:
    token = _ask(as_agent(alice), {"message_ids": _mail(alice, tmp_path, 11)}).proposal["token"]  # type: ignore[index]
    stored = list(ConfirmationToken.objects.for_tenant(alice.tenant).values_list("token_hash", flat=True))
    assert len(stored) == 1 and token not in stored[0] and len(stored[0]) == 64


def test_a_token_is_refused_after_it_expires(alice: Person, tmp_path: Path) -> None:
    ids = _mail(alice, tmp_path, 11)
    token = _ask(as_agent(alice), {"message_ids": ids}).proposal["token"]  # type: ignore[index]
    ConfirmationToken.objects.for_tenant(alice.tenant).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert _ask(as_agent(alice), {"message_ids": ids}, confirmation_token=token).code == "CONFIRMATION_INVALID"
    assert _trashed(alice) == 0


def test_a_token_for_other_input_is_refused_and_burned(alice: Person, tmp_path: Path) -> None:
    ids = _mail(alice, tmp_path, 12)
    token = _ask(as_agent(alice), {"message_ids": ids[:11]}).proposal["token"]  # type: ignore[index]
    assert _ask(as_agent(alice), {"message_ids": ids}, confirmation_token=token).code == "CONFIRMATION_INVALID"
    # burned by the failed attempt: the right input cannot use it any more
    assert _ask(as_agent(alice), {"message_ids": ids[:11]}, confirmation_token=token).code == "CONFIRMATION_INVALID"
    assert _trashed(alice) == 0


def test_the_same_input_in_another_order_is_the_same_input(alice: Person, tmp_path: Path) -> None:
    ids = _mail(alice, tmp_path, 11)
    token = _ask(as_agent(alice), {"message_ids": ids}).proposal["token"]  # type: ignore[index]
    refused = _ask(as_agent(alice), {"message_ids": list(reversed(ids))}, confirmation_token=token)
    # order is part of the input; the canonical form is about encoding, not meaning
    assert refused.code == "CONFIRMATION_INVALID"


def test_a_token_for_another_caller_or_operation_is_refused(alice: Person, mallory: Person, tmp_path: Path) -> None:
    ids = _mail(alice, tmp_path, 11)
    token = _ask(as_agent(alice), {"message_ids": ids}).proposal["token"]  # type: ignore[index]
    other_key = as_agent(alice, credential_id="key-2")
    assert _ask(other_key, {"message_ids": ids}, confirmation_token=token).code == "CONFIRMATION_INVALID"

    token = _ask(as_agent(alice), {"message_ids": ids}).proposal["token"]  # type: ignore[index]
    with pytest.raises(OakenError) as info:
        dispatch(as_agent(alice), Door.MCP, "mark_read", {"message_ids": ids}, confirmation_token=token)
    assert info.value.code == "CONFIRMATION_INVALID"

    token = _ask(as_agent(alice), {"message_ids": ids}).proposal["token"]  # type: ignore[index]
    theirs = _mail(mallory, tmp_path, 11)
    assert _ask(as_agent(mallory), {"message_ids": theirs}, confirmation_token=token).code == "CONFIRMATION_INVALID"
    assert _trashed(alice) == 0 and _trashed(mallory) == 0


def test_a_caller_holds_at_most_the_cap_and_the_oldest_is_revoked(alice: Person, tmp_path: Path, settings) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "CONFIRMATION_TOKENS_PER_CALLER": 5}
    ids = _mail(alice, tmp_path, 11)
    tokens = [_ask(as_agent(alice), {"message_ids": ids}).proposal["token"] for _ in range(6)]  # type: ignore[index]
    live = ConfirmationToken.objects.for_tenant(alice.tenant).filter(used_at__isnull=True).count()
    assert live == 5
    assert _ask(as_agent(alice), {"message_ids": ids}, confirmation_token=tokens[0]).code == "CONFIRMATION_INVALID"
    applied = dispatch(as_agent(alice), Door.MCP, "trash_messages", {"message_ids": ids}, confirmation_token=tokens[-1])
    assert applied.output["changed"] == 11


@pytest.mark.django_db(transaction=True)
def test_twenty_threads_redeeming_one_token_succeed_exactly_once(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    ids = _mail(alice, tmp_path, 11)
    token = _ask(as_agent(alice), {"message_ids": ids}).proposal["token"]  # type: ignore[index]
    outcomes: list[str] = []
    start = threading.Barrier(20)

    def redeem() -> None:
        start.wait()
        try:
            dispatch(as_agent(alice), Door.MCP, "trash_messages", {"message_ids": ids}, confirmation_token=token)
            outcomes.append("ok")
        except OakenError as error:
            outcomes.append(error.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=redeem) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["CONFIRMATION_INVALID"] * 19 + ["ok"]
    assert _trashed(alice) == 11
    assert _trashed(mallory) == 0
