"""Faults an operator meets: what the doors answer while a server they depend on is away."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.test import Client, RequestFactory
from pydantic import BaseModel, ConfigDict

from apps.audit.models import AuditEvent
from apps.core import redis_client as redis_module
from apps.core.errors import OakenError
from apps.core.kinds import Door
from apps.core.redis_client import LocalWindowCounter
from apps.gate.dispatch import dispatch
from apps.mail.importing import import_mail
from apps.operations.registry import Ceiling, OpClass, operation, registry
from config.errors import permission_denied, server_error
from config.postgresql.base import TRUSTED_FOR_SECONDS
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
    return _subjects_of(answer.content)


def _subjects_of(content: bytes) -> list[str]:
    result = json.loads(content)["result"]
    assert not result.get("isError"), result
    listed = result["structuredContent"]
    marker = listed["untrusted_content"]["marker"]
    opening, closing = f"[untrusted:{marker}]", f"[/untrusted:{marker}]"
    return [m["subject"].removeprefix(opening).removesuffix(closing) for m in listed["messages"]]


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


@pytest.mark.django_db(transaction=True)
def test_a_call_whose_statement_times_out_or_whose_session_the_server_ends_answers_service_unavailable(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    """The server's own bounds (statement_timeout; idle_in_transaction_session_timeout, which ends the session
    and is an InternalError by its SQLSTATE class) end a call with SERVICE_UNAVAILABLE, never a 500; the next call
    works."""

    class Nothing(BaseModel):
        model_config = ConfigDict(extra="forbid")

    def too_slow(ctx: Any, data: Nothing) -> Nothing:
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = '50ms'")
            cursor.execute("SELECT pg_sleep(5)")
        return Nothing()

    def idle_too_long(ctx: Any, data: Nothing) -> Nothing:
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL idle_in_transaction_session_timeout = '100ms'")
            time.sleep(1)  # the server ends the session meanwhile
            cursor.execute("SELECT 1")
        return Nothing()

    for name, handler in (("test_too_slow", too_slow), ("test_idle_too_long", idle_too_long)):
        operation(name=name, summary="t", input=Nothing, output=Nothing, op_class=OpClass.READ, ceiling=Ceiling.NEVER)(
            handler
        )
    try:
        for name in ("test_too_slow", "test_idle_too_long"):
            with pytest.raises(OakenError) as refused:
                dispatch(as_person(alice), Door.UI, name, {})
            assert (refused.value.code, refused.value.http_status) == ("SERVICE_UNAVAILABLE", 503), name
            connection.close_if_unusable_or_obsolete()  # what Django does at the end of a request
            _mail(alice, tmp_path, f"after {name}")
            listed = dispatch(as_person(alice), Door.UI, "list_messages", {}).output["messages"]
            assert f"after {name}" in [m["subject"] for m in listed]
        assert not AuditEvent.objects.for_tenant(mallory.tenant).filter(operation__startswith="test_").exists()
    finally:
        registry.remove("test_too_slow")
        registry.remove("test_idle_too_long")


@pytest.mark.django_db(transaction=True)
def test_a_slow_statement_on_a_server_that_answers_is_not_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watchdog probes the server when a statement runs past STALL seconds, and only cuts the connection when
    the server does not open a new one: a long statement (an import, a backfill) on a working server goes on."""
    from config.postgresql import watchdog

    monkeypatch.setattr(watchdog._watchdog, "stall", 0.5)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(2), pg_backend_pid()")
        (_, pid) = cursor.fetchone()
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone() == (pid,)  # the same connection: nothing was cut


@pytest.mark.django_db(transaction=True)
def test_a_connection_that_just_answered_is_not_asked_again_and_a_quiet_one_dropped_is_replaced(
    alice: Person, mallory: Person, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Django asks a persistent connection SELECT 1 before each request's first query (CONN_HEALTH_CHECKS); the
    backend (config.postgresql) skips that while the connection began a query less than a second ago. One quiet
    for longer, which the server dropped meanwhile (a restart), is still asked and replaced."""
    _mail(alice, tmp_path, "Alice's own")
    _mail(mallory, tmp_path, "Mallory's own")
    asked: list[bool] = []
    usable = connection.is_usable

    def asking() -> bool:
        asked.append(usable())
        return asked[-1]

    monkeypatch.setattr(connection, "is_usable", asking)

    def request() -> list[str]:
        connection.close_if_unusable_or_obsolete()  # what request_started and request_finished call
        try:
            listed = dispatch(as_person(alice), Door.UI, "list_messages", {}).output["messages"]
        finally:
            connection.close_if_unusable_or_obsolete()
        return [m["subject"] for m in listed]

    connection.close()
    assert request() == ["Alice's own"] and asked == []  # a new connection needs no check
    assert [request() for _ in range(3)] == [["Alice's own"]] * 3 and asked == []
    # quiet for longer than the trusted second, and dropped by the server meanwhile
    dropped = connection.connection.info.backend_pid
    other = connection.copy()
    with other.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [dropped])
    other.close()
    monkeypatch.setattr(connection, "_used_at", time.monotonic() - TRUSTED_FOR_SECONDS - 0.1)
    assert request() == ["Alice's own"]
    assert asked == [False] and connection.connection.info.backend_pid != dropped
    assert request() == ["Alice's own"] and asked == [False]  # and the new one was used a moment ago


@contextmanager
def _database_away(tmp_path: Path) -> Iterator[None]:
    """This process's database connection goes where no server listens (as while PostgreSQL restarts), and
    comes back afterwards."""
    settings_dict = connection.settings_dict
    working = settings_dict["HOST"]
    connection.close()
    nowhere = tmp_path / "no-server"
    nowhere.mkdir(exist_ok=True)
    settings_dict["HOST"] = str(nowhere)
    try:
        yield
    finally:
        connection.close()
        settings_dict["HOST"] = working


@pytest.mark.django_db(transaction=True)
def test_a_database_away_outside_the_gate_is_503_in_the_error_shape_on_every_door(
    alice: Person, mallory: Person, tmp_path: Path
) -> None:
    """The MCP door looks its key up, the REST door its session, the console its person, before any operation:
    with the database away each answers 503 (the error shape on the doors that speak JSON, a page for a
    person), never Django's HTML 500; once it is back the same calls work, each tenant seeing its own."""
    _mail(alice, tmp_path, "Alice's own")
    _mail(mallory, tmp_path, "Mallory's own")
    key = key_for(alice, ["read"])
    listing = rpc("tools/call", {"name": "list_messages", "arguments": {}})
    browser, api = Client(raise_request_exception=False), api_client(alice.user)
    browser.force_login(alice.user)
    api.raise_request_exception = False

    with _database_away(tmp_path):
        answers = {
            "mcp": post(Client(raise_request_exception=False), listing, token=key),
            "rest": rest_post(api, "list_messages", {}),
            "oauth": Client(raise_request_exception=False).post(
                "/oauth/token/", {"grant_type": "authorization_code", "code": "x", "client_id": "y"}
            ),
        }
        page = browser.get("/")
    for door, answer in answers.items():
        assert (answer.status_code, answer["Content-Type"]) == (503, "application/json"), door
        assert answer.json() == {
            "error": {
                "code": "SERVICE_UNAVAILABLE",
                "message": "the database cannot be reached right now; try again shortly",
            }
        }, door
        assert answer["Retry-After"] == "5"
    assert page.status_code == 503 and page["Content-Type"].startswith("text/html")
    assert "Oaken is unavailable for a moment" in page.content.decode() and "Server Error" not in page.content.decode()

    # back: the next calls connect again
    assert _subjects(post(Client(), listing, token=key)) == ["Alice's own"]
    assert _subjects(post(Client(), listing, token=key_for(mallory, ["read"]))) == ["Mallory's own"]
    assert [m["subject"] for m in rest_post(api, "list_messages", {}).json()["messages"]] == ["Alice's own"]


def test_anything_else_that_escapes_a_view_is_internal_error_in_the_error_shape_on_a_json_door(
    rf: RequestFactory,
) -> None:
    for path in ("/mcp", "/api/v1/ops/list_messages", "/oauth/token/"):
        try:
            raise RuntimeError("a bug that quotes its input")
        except RuntimeError:
            answer = server_error(rf.post(path))
        assert answer.status_code == 500 and json.loads(answer.content) == {
            "error": {"code": "INTERNAL_ERROR", "message": "the request failed"}
        }
    try:
        raise RuntimeError("a bug")
    except RuntimeError:
        page = server_error(rf.get("/"))
    assert page.status_code == 500 and page["Content-Type"].startswith("text/html")


def _is_the_error_shape(answer: Any, status: int, code: str) -> dict[str, Any]:
    assert (answer.status_code, answer["Content-Type"]) == (status, "application/json"), answer.content[:200]
    body = answer.json()
    assert list(body) == ["error"] and body["error"]["code"] == code, body
    return dict(body["error"])


def test_what_django_refuses_before_a_view_is_in_the_error_shape_on_a_json_door_and_a_page_elsewhere(
    rf: RequestFactory, alice: Person, mallory: Person
) -> None:
    """One rule (config.errors.speaks_json) for 400, 403, 404, 405 and 500: /api/, /mcp, /oauth/ and /.well-known/
    answer JSON in the error shape, never echoing what was sent; the console's paths get its pages."""
    key = key_for(alice, ["read"])
    listing = rpc("tools/call", {"name": "list_accounts", "arguments": {}})
    # a Host this service does not answer to (a DNS rebinding page), on every JSON door: 400, no HTML, no echo
    for path in ("/mcp", "/api/v1/ops/list_accounts", "/oauth/token/", "/.well-known/oauth-authorization-server"):
        answer = Client().generic(
            "POST", path, json.dumps(listing), content_type="application/json",
            HTTP_HOST="rebound.example", HTTP_AUTHORIZATION=f"Bearer {key}",
        )  # fmt: skip
        error = _is_the_error_shape(answer, 400, "INVALID_INPUT")
        assert "rebound" not in json.dumps(error), path
    assert AuditEvent.objects.for_tenant(alice.tenant).count() == 0
    # a path no view serves, under each JSON door
    for path in ("/api/v2/x", "/api/v1/no-such-thing", "/api/nope", "/mcp/nope", "/oauth/nope", "/.well-known/nope"):
        error = _is_the_error_shape(Client().get(path), 404, "NOT_FOUND")
        assert error == {"code": "NOT_FOUND", "message": "nothing is served at this path"}, path
    # a method a view does not take: the toolkit's token endpoint, the discovery document
    for method, path in (("GET", "/oauth/token/"), ("DELETE", "/.well-known/oauth-authorization-server")):
        answer = Client().generic(method, path)
        _is_the_error_shape(answer, 405, "INVALID_INPUT")
        assert "POST" in answer["Allow"] or "GET" in answer["Allow"], path
    denied = permission_denied(rf.get("/api/v1/ops/list_accounts"), PermissionDenied("quotes the input"))
    assert denied.status_code == 403 and json.loads(denied.content)["error"]["code"] == "FORBIDDEN"
    assert "quotes" not in denied.content.decode()
    # people still get pages, in the console's layout
    for path in ("/no/such/page", "/apis/v2/x", "/mcpx"):
        page = Client().get(path)
        assert page.status_code == 404 and page["Content-Type"].startswith("text/html"), path
        assert "There is nothing here" in page.content.decode()
    page = Client().get("/accounts/sign-in", HTTP_HOST="rebound.example")
    assert page.status_code == 400 and page["Content-Type"].startswith("text/html")
    assert "could not understand that request" in page.content.decode() and "rebound" not in page.content.decode()
    assert permission_denied(rf.get("/keys"), PermissionDenied())["Content-Type"].startswith("text/html")
    # the consent page is a page, under /oauth/ though it is
    consent = Client().get("/oauth/authorize/", HTTP_HOST="rebound.example")
    assert consent.status_code == 400 and consent["Content-Type"].startswith("text/html")
    # the second tenant's key fares alike and sees nothing either
    other = Client().generic(
        "POST", "/mcp", json.dumps(listing), content_type="application/json",
        HTTP_HOST="rebound.example", HTTP_AUTHORIZATION=f"Bearer {key_for(mallory, ['read'])}",
    )  # fmt: skip
    _is_the_error_shape(other, 400, "INVALID_INPUT")
    assert AuditEvent.objects.for_tenant(mallory.tenant).count() == 0


def test_counters_count_again_once_redis_is_back(settings: Any) -> None:
    """A counter used while Redis was away (its client pointing nowhere) counts on the client in use once Redis
    is back: an outage does not leave sign-up, registration and rate limits failing after it ends."""
    key = f"test-counter-{uuid.uuid4()}"
    working = settings.REDIS_URL
    settings.REDIS_URL = "unix:///nonexistent/redis.sock"
    redis_module.redis_client.cache_clear()
    try:
        with pytest.raises(redis.RedisError):
            redis_module.count_hit(key, 60)
    finally:
        settings.REDIS_URL = working
        redis_module.redis_client.cache_clear()
    assert [redis_module.count_hit(key, 60) for _ in range(3)] == [1, 2, 3]
    assert 0 < redis_module.redis_client().ttl(key) <= 60
    redis_module.redis_client().delete(key)


# ---------------------------------------------------------------- servers that stall (stopped, not refused)


_RESUME = """
import sys, time, psutil
time.sleep(float(sys.argv[1]))
root = psutil.Process(int(sys.argv[2]))
for process in [root, *root.children(recursive=True)]:
    try:
        process.resume()
    except psutil.Error:
        pass
"""


def _resume(root: psutil.Process) -> None:
    for process in [root, *root.children(recursive=True)]:
        with suppress(psutil.NoSuchProcess):
            process.resume()


@contextmanager
def _stopped(pid: int, *, at_most: float = 90) -> Iterator[None]:
    """A server's process and every process it started are stopped (SIGSTOP) for the block, and always continued
    after it: in a finally, and by a guardian process of its own session that continues them after `at_most`
    seconds even if this one is killed meanwhile."""
    root = psutil.Process(pid)
    guardian = subprocess.Popen([sys.executable, "-c", _RESUME, str(at_most), str(pid)], start_new_session=True)
    try:
        root.suspend()  # first: a stopped postmaster starts no new backend
        for child in root.children(recursive=True):
            with suppress(psutil.NoSuchProcess):  # a backend that was ending
                child.suspend()
        yield
    finally:
        _resume(root)
        guardian.kill()
        guardian.wait()


def _postmaster() -> int:
    """The test session's embedded PostgreSQL's postmaster."""
    from django.conf import settings

    pidfile = settings.DATA_DIR / "postgres" / "postmaster.pid"
    lines = pidfile.read_text().splitlines() if pidfile.exists() else []
    if len(lines) < 5 or Path(lines[4]).resolve() != Path(connection.settings_dict["HOST"]).resolve():
        pytest.skip("the session's PostgreSQL is not the embedded one")
    return int(lines[0])


def _http(url: str, *, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, str, bytes, float]:
    """One request: its status, content type, body and how long it took to answer (seconds)."""
    data = None if body is None else json.dumps(body).encode()
    sent = {**({"Content-Type": "application/json"} if data is not None else {}), **(headers or {})}
    request = urllib.request.Request(url, data=data, headers=sent, method="POST" if data is not None else "GET")  # noqa: S310
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 (loopback)
            status, kind, content = answer.status, answer.headers.get("Content-Type", ""), answer.read()
    except urllib.error.HTTPError as refused:
        status, kind, content = refused.code, refused.headers.get("Content-Type", ""), refused.read()
    except TimeoutError:
        status, kind, content = 0, "", b"(no answer)"
    return status, kind.split(";")[0], content, time.monotonic() - started


@dataclass
class _Doors:
    """A person's and an agent's ways in, over HTTP: MCP with a key, REST and the console with a session."""

    base: str
    key: str
    session: str
    csrf: str = "c" * 32

    def calls(self) -> dict[str, tuple[int, str, bytes, float]]:
        cookies = {"Cookie": f"sessionid={self.session}; csrftoken={self.csrf}"}
        return {
            "health": _http(self.base + "/health"),
            "mcp": _http(
                self.base + "/mcp",
                body=rpc("tools/call", {"name": "list_messages", "arguments": {}}),
                headers={"Authorization": f"Bearer {self.key}", "Accept": "application/json, text/event-stream"},
            ),
            "rest": _http(
                self.base + "/api/v1/ops/list_messages", body={}, headers={**cookies, "X-CSRFToken": self.csrf}
            ),
            "console": _http(self.base + "/mail", headers=cookies),
            "schema": _http(self.base + "/api/schema?format=json"),
        }


def _doors(base: str, person: Person) -> _Doors:
    browser = Client()
    browser.force_login(person.user)
    return _Doors(base, key_for(person, ["read"]), browser.cookies["sessionid"].value)


def _rest_subjects(content: bytes) -> list[str]:
    return [m["subject"] for m in json.loads(content)["messages"]]


@pytest.fixture
def stalling_web(transactional_db: None, tmp_path: Path) -> Iterator[tuple[str, float]]:
    """A gunicorn as the live server's, but keeping its database connections (CONN_MAX_AGE: a stalled server is
    met on an open connection too, not only when connecting) and with short database waits: its URL, and the
    longest a request should wait on a database that does not answer (STALL + CONNECT, and a watchdog tick)."""
    from apps.server.management.commands.serve import web_command
    from config.postgresql.watchdog import TICK_SECONDS
    from tests.liveserver import _database_url, wait_until_serving
    from tests.loopback import free_port, stop

    stall, connect = 1, 2
    port = free_port()
    env = {
        **os.environ, "DATABASE_URL": _database_url(), "OAKEN_DB_CONN_MAX_AGE": "60",
        "OAKEN_DB_STALL_SECONDS": str(stall), "OAKEN_DB_CONNECT_TIMEOUT": str(connect),
    }  # fmt: skip
    # into a file: the errors logged while the database is away would fill a pipe nobody reads, and stall the web
    log = tmp_path / "web.log"
    with open(log, "w") as output:
        proc = subprocess.Popen(
            web_command(f"127.0.0.1:{port}", 2, quiet=True), env=env, stdout=output, stderr=subprocess.STDOUT, text=True
        )
    try:
        wait_until_serving(f"http://127.0.0.1:{port}", proc, log=log)
        yield f"http://127.0.0.1:{port}", stall + connect + 2 * TICK_SECONDS
    finally:
        stop(proc)
        print(log.read_text()[-3000:])


def test_a_stalled_postgresql_is_service_unavailable_on_every_door_within_the_deadline_and_recovers_by_itself(
    stalling_web: tuple[str, float], alice: Person, mallory: Person, tmp_path: Path
) -> None:
    """PostgreSQL's postmaster and backends stopped (SIGSTOP), as a frozen server or host: connections stay open
    and silent, and a statement_timeout cannot fire. Every door answers SERVICE_UNAVAILABLE within the configured
    deadline (the error shape on JSON doors, the console's page on /mail), then recovers by itself once the server
    runs again, each tenant seeing its own mail."""
    base, deadline = stalling_web
    _mail(alice, tmp_path, "Alice's own")
    _mail(mallory, tmp_path, "Mallory's own")
    doors, theirs = _doors(base, alice), _doors(base, mallory)
    # every door works, and the web's threads hold connections (two workers, four threads: enough calls for each)
    for _ in range(6):
        working = doors.calls()
        assert {door: answer[0] for door, answer in working.items()} == dict.fromkeys(working, 200), working
    assert _rest_subjects(working["rest"][2]) == ["Alice's own"]
    connection.close()  # this process's own connection is not used while the server is stopped

    with _stopped(_postmaster()):
        for _ in range(2):  # the first calls meet open connections; the next ones connect anew
            answers = doors.calls()
            print({door: round(answer[3], 2) for door, answer in answers.items()}, "deadline", deadline)
            for door, (status, kind, content, took) in answers.items():
                assert took < deadline + 2, (door, took)  # 2 s of headroom for a loaded machine
                if door == "schema" and status == 200:
                    continue  # the document is kept in memory: it needs no database
                assert status == 503, (door, status, content[:300])
                if door == "console":
                    assert kind == "text/html" and "Oaken is unavailable for a moment" in content.decode()
                    continue
                assert kind == "application/json", door
                error = json.loads(content)["error"]
                assert error["code"] == "SERVICE_UNAVAILABLE" and set(error) <= {"code", "message"}, door
            assert json.loads(answers["health"][2])["failing"] == ["database"]

    # running again: each door answers again, by itself, without a restart, and each tenant sees only its own
    started = time.monotonic()
    while True:
        answers, others = doors.calls(), theirs.calls()
        if all(answer[0] == 200 for answer in [*answers.values(), *others.values()]):
            break
        statuses = {door: answer[0] for door, answer in answers.items()}, {d: a[0] for d, a in others.items()}
        assert time.monotonic() - started < 30, statuses
        time.sleep(0.5)
    print("recovered after", round(time.monotonic() - started, 2), "s")
    assert _rest_subjects(answers["rest"][2]) == ["Alice's own"]
    assert _subjects_of(answers["mcp"][2]) == ["Alice's own"]
    assert _rest_subjects(others["rest"][2]) == ["Mallory's own"]
    assert _subjects_of(others["mcp"][2]) == ["Mallory's own"]


def test_a_stalled_redis_costs_a_call_its_two_second_bound_at_most(
    live_url: str, transactional_db: None, alice: Person, mallory: Person, tmp_path: Path
) -> None:
    """Redis stopped (SIGSTOP), not refusing: its socket timeout (2 s) bounds each wait, the calls that can go on
    without it do (reads, their rate limits counted in the process), /health says so within the bound, and
    Redis running again is used again."""
    from django.conf import settings

    _mail(alice, tmp_path, "Alice's own")
    _mail(mallory, tmp_path, "Mallory's own")
    doors, theirs = _doors(live_url, alice), _doors(live_url, mallory)
    assert all(answer[0] == 200 for answer in doors.calls().values())
    redis_pid = int((settings.DATA_DIR / "redis" / "redis.pid").read_text())
    with _stopped(redis_pid):
        answers = {**doors.calls(), "theirs": theirs.calls()["mcp"]}
    print({door: round(answer[3], 2) for door, answer in answers.items()})
    for door, (_, _, _, took) in answers.items():
        assert took < 2 + 1.5, (door, took)  # the 2 s socket timeout, and headroom for a loaded machine
    assert answers["health"][0] == 503 and json.loads(answers["health"][2])["failing"] == ["redis"]
    assert _subjects_of(answers["mcp"][2]) == ["Alice's own"] and _subjects_of(answers["theirs"][2]) == [
        "Mallory's own"
    ]
    assert _rest_subjects(answers["rest"][2]) == ["Alice's own"]
    assert answers["console"][0] == 200
    assert _http(live_url + "/health")[0] == 200


def test_a_server_that_refuses_a_new_connection_at_once_answers_and_only_a_silent_one_is_stalled(
    tmp_path: Path,
) -> None:
    """The watchdog cuts waiting connections only when the server is silent. A server out of connection slots
    ("too many clients"), starting up, or refusing a password answers at once: its busy connections are left to
    finish. A socket that takes a connection and never answers is silent until the probe's timeout."""
    import socket

    from config.postgresql import watchdog

    ours = connection.get_connection_params()
    params = {k: v for k, v in ours.items() if k in {"dbname", "user", "host", "port", "passfile"}}
    started = time.monotonic()
    assert watchdog.probe({**params, "password": "not-the-password"}, 2) is True
    assert time.monotonic() - started < 2
    assert watchdog.probe({**params, "password": ours["password"]}, 2) is True

    silent_dir = Path(tempfile.mkdtemp(prefix="pg-", dir="/tmp"))  # a short path: unix socket names are short
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(silent_dir / ".s.PGSQL.5432"))
        listener.listen(8)  # connections are queued, never accepted, never answered
        silent = {**params, "host": str(silent_dir), "port": 5432, "password": "any"}
        started = time.monotonic()
        assert watchdog.probe(silent, 2) is False
        assert time.monotonic() - started >= 1.5  # it waited for an answer, and none came
    finally:
        listener.close()
        shutil.rmtree(silent_dir, ignore_errors=True)


@pytest.mark.django_db(transaction=True)
def test_a_copy_or_a_server_side_cursor_on_a_stalled_postgresql_ends_with_an_error_not_a_hang() -> None:
    """Two waits happen outside any statement Django runs: a server-side cursor's fetches (QuerySet.iterator(),
    the search index's scans) and a COPY (the importer's and the indexer's bulk writes). With the server stopped
    (SIGSTOP) in the middle of each, each ends with OperationalError within the watchdog's deadline, not when the
    server runs again."""
    from django.conf import settings
    from django.db import OperationalError

    deadline = settings.DATABASE_WAITS["STALL"] + settings.DATABASE_WAITS["CONNECT"] + 5  # headroom under load
    postmaster = _postmaster()

    def _copy_some(cursor: Any) -> None:
        with cursor.copy("COPY copied (n) FROM STDIN") as copy:
            for n in range(10):
                copy.write_row((n,))

    def reconnected() -> None:
        connection.close()
        time.sleep(settings.DATABASE_WAITS["STALL"] + 0.5)  # a server found silent is not asked for that long

    cursor = connection.chunked_cursor()  # autocommit: a cursor WITH HOLD
    cursor.execute("SELECT n FROM generate_series(1, 1000) AS n")
    assert [row[0] for row in cursor.fetchmany(10)] == list(range(1, 11))
    with _stopped(postmaster, at_most=deadline + 30):
        started = time.monotonic()
        with pytest.raises(OperationalError):
            cursor.fetchmany(10)
        took = time.monotonic() - started
    assert took < deadline, took
    reconnected()

    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE copied (n int)")
        with _stopped(postmaster, at_most=deadline + 30):
            started = time.monotonic()
            with pytest.raises(OperationalError):
                _copy_some(cursor)
            took = time.monotonic() - started
    assert took < deadline, took
    reconnected()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
