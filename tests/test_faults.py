"""Faults an operator meets: what the doors answer while a server they depend on is away."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from pydantic import BaseModel, ConfigDict

from apps.audit.models import AuditEvent
from apps.core.errors import OakenError
from apps.core.kinds import Door
from apps.gate.dispatch import dispatch
from apps.mail.importing import import_mail
from apps.operations.registry import Ceiling, OpClass, operation, registry
from config import redis_client as redis_module
from config.redis_client import LocalWindowCounter
from tests.callers import as_person
from tests.conftest import Person
from tests.mailfactory import raw_message, write_mbox
from tests.test_mcp_door import key_for, post, rpc
from tests.test_rest_door import api_client
from tests.test_rest_door import post as rest_post


@pytest.fixture
def redis_away(settings: Any) -> Iterator[None]:
    """The web process cannot reach Redis (nothing listens where it points); restored afterwards."""
    working = settings.REDIS_URL
    settings.REDIS_URL = "unix:///nonexistent/redis.sock"
    redis_module.redis_client.cache_clear()
    yield
    settings.REDIS_URL = working
    redis_module.redis_client.cache_clear()


def _mail(person: Person, tmp_path: Path, subject: str) -> None:
    mbox = write_mbox(tmp_path / f"{person.user.pk}.mbox", [raw_message(subject=subject, body="hello")])
    import_mail(tenant=person.tenant, workspace=person.workspace, account_name="local", path=mbox)


def _subjects(answer: Any) -> list[str]:
    """The subjects listed, out of their fences."""
    result = answer.json()["result"]
    assert not result.get("isError"), result
    content = result["structuredContent"]
    marker = content["untrusted_content"]["marker"]
    opening, closing = f"[untrusted:{marker}]", f"[/untrusted:{marker}]"
    return [m["subject"].removeprefix(opening).removesuffix(closing) for m in content["messages"]]


def test_mcp_reads_keep_working_while_redis_is_away_and_stay_rate_limited(
    client: Client, alice: Person, mallory: Person, tmp_path: Path, settings: Any, redis_away: None
) -> None:
    _mail(alice, tmp_path, "Alice's own")
    _mail(mallory, tmp_path, "Mallory's own")
    settings.OPERATIONS = {**settings.OPERATIONS, "MCP_REQUESTS_PER_MINUTE": 3}
    key, other = key_for(alice, ["read"]), key_for(mallory, ["read"])
    listing = rpc("tools/call", {"name": "list_messages", "arguments": {}})
    answers = [post(client, listing, token=key) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert all(_subjects(a) == ["Alice's own"] for a in answers[:3])
    assert answers[3].json()["error"]["code"] == "RATE_LIMITED"
    # counted per credential in this process: another tenant's key has its own minute, and sees only its own mail
    theirs = post(client, listing, token=other)
    assert theirs.status_code == 200 and _subjects(theirs) == ["Mallory's own"]


def test_rest_reads_keep_working_while_redis_is_away(
    alice: Person, mallory: Person, tmp_path: Path, redis_away: None
) -> None:
    _mail(alice, tmp_path, "Alice's own")
    _mail(mallory, tmp_path, "Mallory's own")
    answer = rest_post(api_client(alice.user), "list_messages", {})
    assert answer.status_code == 200, answer.content
    assert [m["subject"] for m in answer.json()["messages"]] == ["Alice's own"]


def test_the_local_fallback_counts_windows_and_keeps_its_memory_bounded() -> None:
    counter = LocalWindowCounter(max_keys=3)
    assert [counter.hit("a", 60, now=0.0) for _ in range(3)] == [1, 2, 3]
    assert counter.hit("a", 60, now=60.0) == 1  # a new window
    for i, key in enumerate(("b", "c", "d", "e")):
        counter.hit(key, 60, now=61.0 + i)
    assert len(counter._windows) <= 3


@pytest.mark.django_db(transaction=True)
def test_a_call_whose_database_goes_away_answers_service_unavailable_and_the_next_call_works(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    """The server ends this process's session in the middle of a handler, as a restart or failover would."""

    class Closed(BaseModel):
        model_config = ConfigDict(extra="forbid")

    def cut_off(ctx: Any, data: Closed) -> Closed:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return Closed()

    operation(
        name="test_cut_off", summary="t", input=Closed, output=Closed, op_class=OpClass.READ, ceiling=Ceiling.NEVER
    )(cut_off)
    try:
        with pytest.raises(OakenError) as away:
            dispatch(as_person(alice), Door.UI, "test_cut_off", {})
        assert (away.value.code, away.value.http_status) == ("SERVICE_UNAVAILABLE", 503)
        connection.close()  # what Django does with an unusable connection at the end of a request
        _mail(alice, tmp_path, "Still here")
        listed = dispatch(as_person(alice), Door.UI, "list_messages", {}).output["messages"]
        assert [m["subject"] for m in listed] == ["Still here"]
        assert not AuditEvent.objects.for_tenant(mallory.tenant).filter(operation="test_cut_off").exists()
    finally:
        registry.remove("test_cut_off")
