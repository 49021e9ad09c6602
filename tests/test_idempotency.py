"""Idempotency (SPEC §13) through the REST door: an `Idempotency-Key` replays the first response, never runs twice."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.utils import timezone

from apps.core.ids import IDEMPOTENCY_KEY_MAX_CHARS
from apps.gate.models import IdempotencyRecord
from apps.mail.models import Label, Message
from apps.workspaces.models import Membership
from tests.conftest import Mailbox, Person, give_mail
from tests.mailfactory import raw_message, write_mbox
from tests.test_cli_door import oaken_call
from tests.test_mcp_door import key_for, rpc
from tests.test_mcp_door import post as mcp_post
from tests.test_rest_door import api_client, error_of, member_of, post

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse as Answer

KEY = "create-receipts-1"


def _labels(person: Person) -> list[str]:
    return sorted(Label.objects.for_tenant(person.tenant).values_list("name", flat=True))


def _replayed(response: Answer) -> bool:
    return response.headers.get("Idempotent-Replayed") == "true"


def test_a_repeated_call_with_the_same_key_returns_the_first_response(
    alice: Person, alice_mail: Mailbox, mallory: Person
) -> None:
    client = api_client(alice.user)
    body = {"account_id": alice_mail.account_id, "name": "Receipts", "color": "#00aa00"}
    first = post(client, "create_label", body, key=KEY)
    assert first.status_code == 200
    assert not _replayed(first)

    again = post(client, "create_label", body, key=KEY)
    assert again.status_code == 200
    assert _replayed(again)
    assert again.json() == first.json()
    assert _labels(alice) == ["Receipts"]
    assert _labels(mallory) == []

    # without a key the same body runs again (and here meets the existing name)
    response = post(client, "create_label", body)
    assert response.status_code == 409
    assert error_of(response)["code"] == "CONFLICT"


def test_the_same_key_with_a_different_input_is_refused(alice: Person, alice_mail: Mailbox, mallory: Person) -> None:
    client = api_client(alice.user)
    first = post(client, "create_label", {"account_id": alice_mail.account_id, "name": "Receipts"}, key=KEY)
    assert first.status_code == 200

    response = post(client, "create_label", {"account_id": alice_mail.account_id, "name": "Invoices"}, key=KEY)
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "IDEMPOTENCY_MISMATCH"
    assert error["field"] == "idempotency_key"
    assert not _replayed(response)
    assert _labels(alice) == ["Receipts"]
    assert IdempotencyRecord.objects.for_tenant(alice.tenant).count() == 1


def test_a_key_belongs_to_one_person_in_one_tenant(
    alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox, tmp_path: Path
) -> None:
    first = post(api_client(alice.user), "create_label", {"account_id": alice_mail.account_id, "name": "A"}, key=KEY)
    assert first.status_code == 200

    # mallory reusing alice's key runs her own call: no replay of alice's label, no mismatch
    theirs = post(
        api_client(mallory.user), "create_label", {"account_id": mallory_mail.account_id, "name": "M"}, key=KEY
    )
    assert theirs.status_code == 200
    assert not _replayed(theirs)
    assert theirs.json()["label"]["account_id"] == mallory_mail.account_id
    assert theirs.json()["label"]["id"] != first.json()["label"]["id"]
    assert _labels(alice) == ["A"]
    assert _labels(mallory) == ["M"]

    # another person in alice's own tenant, same key, same body: a call of his own (which meets alice's label)
    bob = member_of(alice)
    as_bob = api_client(bob.user)
    same = post(
        as_bob, "create_label", {"account_id": alice_mail.account_id, "name": "A"}, key=KEY, tenant=alice.tenant.pk
    )
    assert same.status_code == 409
    assert error_of(same)["code"] == "CONFLICT"

    # one person, the same key in two tenants: two calls
    in_alices = post(
        as_bob, "create_label", {"account_id": alice_mail.account_id, "name": "B"}, key="k2", tenant=alice.tenant.pk
    )
    bob_mail = give_mail(bob, tmp_path, "bob", n=1)
    in_his = post(as_bob, "create_label", {"account_id": bob_mail.account_id, "name": "B"}, key="k2")
    assert in_alices.status_code == in_his.status_code == 200
    assert not _replayed(in_alices) and not _replayed(in_his)
    assert in_alices.json()["label"]["id"] != in_his.json()["label"]["id"]
    assert _labels(alice) == ["A", "B"]
    assert _labels(mallory) == ["M"]


def test_a_failed_first_call_stores_nothing_so_a_corrected_retry_runs(
    alice: Person, alice_mail: Mailbox, mallory: Person
) -> None:
    client = api_client(alice.user)
    account = alice_mail.account_id

    # refused before it runs (input): nothing is kept under the key
    refused = post(client, "create_label", {"account_id": account, "name": "Receipts", "color": "green"}, key=KEY)
    assert refused.status_code == 400
    assert not IdempotencyRecord.objects.for_tenant(alice.tenant).exists()
    fixed = post(client, "create_label", {"account_id": account, "name": "Receipts", "color": "#00ff00"}, key=KEY)
    assert fixed.status_code == 200
    assert not _replayed(fixed)

    # refused while it runs (the handler's CONFLICT): the claim on the key is rolled back with the rest
    clash = post(client, "create_label", {"account_id": account, "name": "Receipts"}, key="second")
    assert clash.status_code == 409
    assert IdempotencyRecord.objects.for_tenant(alice.tenant).filter(key="second").count() == 0
    label_id = fixed.json()["label"]["id"]
    assert post(client, "rename_label", {"label_id": label_id, "name": "Old receipts"}).status_code == 200
    retry = post(client, "create_label", {"account_id": account, "name": "Receipts"}, key="second")
    assert retry.status_code == 200
    assert not _replayed(retry)
    assert _labels(alice) == ["Old receipts", "Receipts"]
    assert _labels(mallory) == []


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicates_run_once(alice: Person, alice_mail: Mailbox, mallory: Person) -> None:
    threads = 8
    body = {"account_id": alice_mail.account_id, "name": "Receipts"}
    clients = [api_client(alice.user) for _ in range(threads)]
    start = threading.Barrier(threads)
    answers: list[tuple[int, dict[str, Any], bool]] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def call(i: int) -> None:
        try:
            start.wait(timeout=30)
            response = post(clients[i], "create_label", body, key=KEY)
            with lock:
                answers.append((response.status_code, response.json(), _replayed(response)))
        except BaseException as exc:  # reported below: a thread's exception would otherwise vanish
            with lock:
                failures.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=call, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert not failures, failures
    assert len(answers) == threads
    # the implementation waits for the first call instead of answering CONFLICT: all succeed, one ran
    assert {status for status, _, _ in answers} == {200}
    assert len({body["label"]["id"] for _, body, _ in answers}) == 1
    assert sorted(replayed for _, _, replayed in answers) == [False] + [True] * (threads - 1)
    assert _labels(alice) == ["Receipts"]
    assert IdempotencyRecord.objects.for_tenant(alice.tenant).count() == 1
    assert _labels(mallory) == []


def test_keys_are_kept_at_least_a_day(alice: Person, alice_mail: Mailbox, mallory: Person) -> None:
    assert settings.OPERATIONS["IDEMPOTENCY_RETENTION_HOURS"] >= 24
    client = api_client(alice.user)
    body = {"account_id": alice_mail.account_id, "name": "Receipts"}
    first = post(client, "create_label", body, key=KEY)
    IdempotencyRecord.objects.for_tenant(alice.tenant).update(
        created_at=timezone.now() - timedelta(hours=23, minutes=59)
    )

    again = post(client, "create_label", body, key=KEY)
    assert again.status_code == 200
    assert _replayed(again)
    assert again.json() == first.json()
    assert _labels(alice) == ["Receipts"]


def test_a_retried_deletion_replays_its_first_response(alice: Person, alice_mail: Mailbox, mallory: Person) -> None:
    client = api_client(alice.user)
    label_id = post(client, "create_label", {"account_id": alice_mail.account_id, "name": "Old"}).json()["label"]["id"]
    first = post(client, "delete_label", {"label_id": label_id}, confirm=True, key=KEY)
    assert first.status_code == 200

    again = post(client, "delete_label", {"label_id": label_id}, confirm=True, key=KEY)
    assert again.status_code == 200
    assert _replayed(again)
    assert again.json() == first.json()


def test_a_refused_first_call_binds_nothing_so_the_key_may_carry_another_input(
    alice: Person, alice_mail: Mailbox, mallory: Person, mallory_mail: Mailbox
) -> None:
    """The rule (docs/gate.md): only a call that completed binds its key. One refused before it ran (its input, its
    bound, the caller's role) or while it ran (the handler's refusal rolls its transaction back) changed nothing
    and kept nothing: the same key may then carry another input, and the first call that completes binds it."""
    client = api_client(alice.user)
    page_max = settings.OPERATIONS["PAGE_SIZE_MAX"]

    # LIMIT_EXCEEDED, then the same key with another input runs; from then on it is bound to that input
    over = post(client, "list_messages", {"limit": page_max + 1}, key="page")
    assert over.status_code == 422 and error_of(over)["code"] == "LIMIT_EXCEEDED"
    assert error_of(over)["field"] == "limit"
    assert not IdempotencyRecord.objects.for_tenant(alice.tenant).exists()
    first = post(client, "list_messages", {"limit": 1}, key="page")
    assert first.status_code == 200 and not _replayed(first)
    again = post(client, "list_messages", {"limit": 1}, key="page")
    assert again.status_code == 200 and _replayed(again) and again.json() == first.json()
    other = post(client, "list_messages", {"limit": 2}, key="page")
    assert other.status_code == 422 and error_of(other)["code"] == "IDEMPOTENCY_MISMATCH"
    # a refusal after the key was bound does not unbind it either: the key still replays
    assert post(client, "list_messages", {"limit": page_max + 1}, key="page").status_code == 422
    assert _replayed(post(client, "list_messages", {"limit": 1}, key="page"))

    # INVALID_INPUT, then another input
    bad = post(client, "create_label", {"account_id": alice_mail.account_id, "name": ""}, key="label")
    assert bad.status_code == 400 and error_of(bad)["code"] == "INVALID_INPUT"
    made = post(client, "create_label", {"account_id": alice_mail.account_id, "name": "Receipts"}, key="label")
    assert made.status_code == 200 and not _replayed(made)

    # the handler's own refusal (CONFLICT: the name is taken), then another input under the same key
    clash = post(client, "create_label", {"account_id": alice_mail.account_id, "name": "Receipts"}, key="clash")
    assert clash.status_code == 409 and error_of(clash)["code"] == "CONFLICT"
    renamed = post(client, "create_label", {"account_id": alice_mail.account_id, "name": "Invoices"}, key="clash")
    assert renamed.status_code == 200 and not _replayed(renamed)

    # FORBIDDEN (the role), then another input once the person may call it
    bob = member_of(alice)
    as_bob = api_client(bob.user)
    body = {"name": "legal"}
    refused = post(as_bob, "create_workspace", body, confirm=True, key="ws", tenant=alice.tenant.pk)
    assert refused.status_code == 403 and error_of(refused)["code"] == "FORBIDDEN"
    Membership.objects.filter(tenant=alice.tenant, user=bob.user).update(role="ADMIN")
    created = post(as_bob, "create_workspace", {"name": "ops"}, confirm=True, key="ws", tenant=alice.tenant.pk)
    assert created.status_code == 200 and not _replayed(created)
    mismatch = post(as_bob, "create_workspace", body, confirm=True, key="ws", tenant=alice.tenant.pk)
    assert mismatch.status_code == 422 and error_of(mismatch)["code"] == "IDEMPOTENCY_MISMATCH"
    assert sorted(IdempotencyRecord.objects.for_tenant(alice.tenant).values_list("key", flat=True)) == [
        "clash",
        "label",
        "page",
        "ws",
    ]

    # the second tenant's same keys are its own: nothing of alice's is replayed or refused there
    theirs = post(api_client(mallory.user), "list_messages", {"limit": 2}, key="page")
    assert theirs.status_code == 200 and not _replayed(theirs)
    assert {m["id"] for m in theirs.json()["messages"]} <= set(mallory_mail.message_ids)
    label = post(
        api_client(mallory.user), "create_label", {"account_id": mallory_mail.account_id, "name": "Mine"}, key="label"
    )
    assert label.status_code == 200 and not _replayed(label)
    assert _labels(alice) == ["Invoices", "Receipts"]
    assert _labels(mallory) == ["Mine"]


@pytest.mark.parametrize(
    "key",
    ["", "k" * 256, " leading", "trailing ", "tab\tinside", "nul\x00inside", "caf\u00e9", "line\nbreak"],
    ids=["empty", "too-long", "leading-space", "trailing-space", "tab", "nul", "non-ascii", "newline"],
)
def test_a_key_outside_its_published_bound_and_pattern_is_invalid_input_never_repeated(
    alice: Person, alice_mail: Mailbox, mallory: Person, key: str
) -> None:
    client = api_client(alice.user)
    response = post(client, "create_label", {"account_id": alice_mail.account_id, "name": "Receipts"}, key=key)
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == "INVALID_INPUT" and error["field"] == "idempotency_key"
    if key.strip():
        assert key.strip() not in response.content.decode()
    assert _labels(alice) == []
    assert not IdempotencyRecord.objects.for_tenant(alice.tenant).exists()


def test_the_longest_key_and_inner_spaces_are_accepted(alice: Person, alice_mail: Mailbox, mallory: Person) -> None:
    client = api_client(alice.user)
    for i, key in enumerate(["k" * IDEMPOTENCY_KEY_MAX_CHARS, "retry 2 of ~!@#$%^&*()", "x"]):
        body = {"account_id": alice_mail.account_id, "name": f"Label {i}"}
        first = post(client, "create_label", body, key=key)
        assert first.status_code == 200 and not _replayed(first)
        assert _replayed(post(client, "create_label", body, key=key))
    assert IdempotencyRecord.objects.for_tenant(alice.tenant).count() == 3
    assert _labels(mallory) == []


def test_a_key_with_a_nul_over_mcp_is_invalid_input_not_a_server_error(
    alice: Person, alice_mail: Mailbox, mallory: Person
) -> None:
    token = key_for(alice, ["read", "write"])
    arguments = {"account_id": alice_mail.account_id, "name": "Receipts"}
    for key, field in (("a\x00b", "idempotency_key"), (7, "idempotency_key"), ("", "idempotency_key")):
        call = {"name": "create_label", "arguments": {**arguments, "idempotency_key": key}}
        response = mcp_post(Client(), rpc("tools/call", call), token=token)
        assert response.status_code == 200
        result = response.json()["result"]
        assert result["isError"] is True
        error = json.loads(result["content"][0]["text"])["error"]
        assert error["code"] == "INVALID_INPUT" and error["field"] == field
    assert _labels(alice) == []
    ok = mcp_post(
        Client(),
        rpc("tools/call", {"name": "create_label", "arguments": {**arguments, "idempotency_key": "k"}}),
        token=token,
    )
    assert ok.json()["result"]["isError"] is False
    assert _labels(alice) == ["Receipts"] and _labels(mallory) == []


def test_an_operation_that_commits_in_batches_refuses_a_key_it_could_not_keep(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    """import_mail keeps the batches it finished when it fails: there is no one answer to bind a key to, so the
    cli door's key is refused, never silently ignored."""
    mbox = write_mbox(tmp_path / "in.mbox", [raw_message(subject="Hello")])
    body = {"account_name": "local", "path": str(mbox)}
    code, out = oaken_call("import_mail", alice, "--idempotency-key", "k", input=body)
    assert (code, out["error"]["code"], out["error"]["field"]) == (1, "INVALID_INPUT", "idempotency_key")
    assert not Message.objects.for_tenant(alice.tenant).exists()
    code, out = oaken_call("import_mail", alice, input=body)
    assert code == 0 and out["imported"] == 1
    assert not Message.objects.for_tenant(mallory.tenant).exists()
