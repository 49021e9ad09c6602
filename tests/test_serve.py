"""`oaken serve` on a fresh data folder: embedded servers, migrations, web + worker + beat + IDLE watcher, clean
stop."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.loopback import free_port
from tests.test_embedded import pg_ctl

PASSWORD_FILES = ("postgres-password", "redis-password")


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (loopback URL built here)
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.slow
def test_serve_brings_everything_up_and_stops_it_cleanly(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(OAKEN_DATA_DIR=str(tmp_path / "data"), OAKEN_PORT=str(port), OAKEN_WEB_WORKERS="1")
    oaken = Path(sys.executable).with_name("oaken")
    proc = subprocess.Popen([str(oaken), "serve"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status, body = _get(f"http://127.0.0.1:{port}/health")
                if status == 200:
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.5)
        assert status == 200, "serve did not answer /health"
        assert body == {"status": "ok"}
        # the API docs and their files come from gunicorn itself, under the strict CSP
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(base + "/api/docs", timeout=5) as docs:  # noqa: S310 (loopback)
            assert "script-src 'self'" in docs.headers["Content-Security-Policy"]
            assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in docs.read().decode()
        bundle = base + "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"
        with urllib.request.urlopen(bundle, timeout=5) as script:  # noqa: S310 (loopback)
            assert script.headers["Content-Type"].startswith("text/javascript") and b"SwaggerUIBundle" in script.read()

        children = psutil.Process(proc.pid).children(recursive=True)
        commands = [" ".join(c.cmdline()) for c in children]
        assert any("gunicorn" in c for c in commands)
        assert any("celery" in c and " worker" in c for c in commands)
        assert any("celery" in c and " beat" in c for c in commands)
        # the IMAP IDLE watcher is a child of its own, started again when it dies (serve itself carries on)
        watchers = [c for c in children if "watch-mail" in " ".join(c.cmdline())]
        assert len(watchers) == 1
        watchers[0].kill()

        def new_watcher() -> list[psutil.Process]:
            found = []
            for c in psutil.Process(proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if "watch-mail" in " ".join(c.cmdline()) and c.pid != watchers[0].pid:
                        found.append(c)
            return found

        restarted = _until(new_watcher, "the watcher started again", 30)
        assert proc.poll() is None
        children = psutil.Process(proc.pid).children(recursive=True)
        assert restarted[0].pid in [c.pid for c in children]
        postmaster = int((tmp_path / "data" / "postgres" / "postmaster.pid").read_text().split()[0])
        redis_pid = int((tmp_path / "data" / "redis" / "redis.pid").read_text())

        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, output[-2000:]
    assert f"http://127.0.0.1:{port}/" in output
    # the embedded servers' passwords reach the children in their environment, never the output (Celery's banner
    # names the broker; migrate, gunicorn and the embedded module log)
    shown = [(tmp_path / "data" / "secrets" / name).read_text().strip() in output for name in PASSWORD_FILES]
    assert shown == [False, False]  # (a failure must not print them)
    time.sleep(0.5)
    for pid in [c.pid for c in children] + [postmaster, redis_pid]:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


# ---------------------------------------------------------------- PostgreSQL restarted under a running serve


def _oaken(env: dict[str, str], *args: str, stdin: str | None = None) -> dict[str, Any]:
    """One `oaken` command against the servers `oaken serve` runs (it attaches to them); its JSON answer."""
    oaken = Path(sys.executable).with_name("oaken")
    done = subprocess.run([str(oaken), *args], env=env, input=stdin, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _mcp(base: str, key: str, name: str) -> tuple[int, str, Any]:
    """(status, content type, JSON body) of one MCP tools/call."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": {}}})
    request = urllib.request.Request(  # noqa: S310 (loopback URL built here)
        base + "/mcp",
        data=body.encode(),
        method="POST",
        headers={
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            status, kind, raw = response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as exc:
        status, kind, raw = exc.code, exc.headers.get("Content-Type", ""), exc.read()
    try:
        return status, kind, json.loads(raw)
    except ValueError:
        return status, kind, raw.decode(errors="replace")


def _subjects(answer: Any) -> list[str]:
    content = answer["result"]["structuredContent"]
    marker = content["untrusted_content"]["marker"]
    opening, closing = f"[untrusted:{marker}]", f"[/untrusted:{marker}]"
    return [m["subject"].removeprefix(opening).removesuffix(closing) for m in content["messages"]]


def _postmaster(pgdata: Path) -> tuple[int, str]:
    """The running postmaster's pid and socket folder (postmaster.pid's first and fifth lines)."""
    lines = (pgdata / "postmaster.pid").read_text().splitlines()
    return int(lines[0]), lines[4]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _until(check: Any, what: str, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting until {what}")
        time.sleep(0.5)


@pytest.mark.slow
def test_postgres_restarted_under_serve_web_and_worker_recover_without_a_restart(tmp_path: Path) -> None:
    from celery import Celery

    from config.embedded import EmbeddedRedis
    from config.settings.queue import celery_url
    from tests.mailfactory import raw_message, write_mbox

    port, data = free_port(), tmp_path / "data"
    pgdata = data / "postgres"
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(OAKEN_DATA_DIR=str(data), OAKEN_PORT=str(port), OAKEN_WEB_WORKERS="1", OAKEN_WORKER_CONCURRENCY="1")
    oaken = Path(sys.executable).with_name("oaken")
    # into a file: the worker logs every task, and a pipe nobody reads for a minute would fill and stall it
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(oaken), "serve"], env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    broker = celery_url(EmbeddedRedis(data / "redis").url)  # with the password kept in the data folder
    tasks = Celery("probe", broker=broker, backend=broker, set_as_current=False)
    try:

        def healthy() -> bool:
            try:
                return _get(base + "/health")[0] == 200
            except (urllib.error.URLError, ConnectionError, OSError):
                return False

        _until(lambda: healthy() or proc.poll() is not None, "serve answered /health", 120)
        assert proc.poll() is None, log.read_text()[-3000:]
        # two people in two tenants, each with a message of their own; alice's agent key reads hers
        for who in ("alice", "mallory"):
            email = f"{who}@example.test"
            _oaken(env, "user", "create", "--email", email, "--password-stdin", stdin=f"{who} long passphrase 42\n")
            mbox = write_mbox(tmp_path / f"{who}.mbox", [raw_message(subject=f"{who}'s own", body="hello")])
            _oaken(env, "import-mail", str(mbox), "--user", email)
        key = _oaken(env, "apikey", "create", "--user", "alice@example.test", "--scopes", "read")["key"]

        status, _, answer = _mcp(base, key, "list_messages")
        assert status == 200 and _subjects(answer) == ["alice's own"], answer
        # a task round trip through the worker, which reads the database (no such request: not claimed)
        probe = str(uuid.uuid4())
        assert tasks.send_task("outbound.deliver", args=[probe]).get(timeout=60) == "not claimed"

        # PostgreSQL stops (a fast shutdown: every session is ended, as a restart or a failover does) ...
        before, sockets = _postmaster(pgdata)
        pg_ctl(pgdata, "-w", "-m", "fast", "stop")
        _until(lambda: _gone(before), "the postmaster exited", 30)
        # ... and while it is away the web answers 503 in the error shape, never an HTML 500
        status, body = _get(base + "/health")
        assert (status, body["failing"], body["error"]["code"]) == (503, ["database"], "SERVICE_UNAVAILABLE")
        status, kind, answer = _mcp(base, key, "list_messages")
        assert (status, kind.split(";")[0]) == (503, "application/json"), (status, kind, answer)
        assert answer["error"]["code"] == "SERVICE_UNAVAILABLE", answer
        # it starts again on the same data folder and socket (one server: the folder's lock file allows no other)
        pg_ctl(pgdata, "-w", "-o", f'-h "" -k {sockets}', "-l", str(pgdata / "log"), "start")
        after, _ = _postmaster(pgdata)
        assert after != before

        started = time.monotonic()
        _until(healthy, "the web answered again", 30)
        status, _, answer = _until(
            lambda: (found := _mcp(base, key, "list_messages"))[0] == 200 and found, "MCP answered again", 30
        )
        assert _subjects(answer) == ["alice's own"]
        web_back = time.monotonic() - started
        # the worker's database connection died with the server; its next task gets a new one
        after_restart = tasks.send_task("outbound.deliver", args=[probe])
        assert after_restart.get(timeout=60) == "not claimed"
        assert time.monotonic() - started < 60, web_back
        # answered by this serve's worker (its log says so)
        _until(lambda: f"outbound.deliver[{after_restart.id}] succeeded" in log.read_text(), "the worker logged it", 10)

    finally:
        # stopped as an operator stops it, whatever happened: its children and servers go with it
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log.read_text()[-3000:]
    time.sleep(0.5)
    # the restarted server was stopped with serve: nothing is left running on the data folder
    assert _gone(after)
    # what was logged while the database was away (the web's and the worker's errors) names no password
    output = log.read_text()
    assert [(data / "secrets" / name).read_text().strip() in output for name in PASSWORD_FILES] == [False, False]


# ---------------------------------------------------------------- gunicorn's control socket


def _listeners(control: Path) -> list[str]:
    """The addresses the gunicorn behind a control socket listens on (what `gunicornc show listeners` says)."""
    from gunicorn.ctl.client import ControlClient

    with ControlClient(str(control), timeout=10) as client:
        return [listener["address"] for listener in client.send_command("show listeners")["listeners"]]


def test_each_web_server_has_its_control_socket_in_the_data_folder(live_url: str) -> None:
    """Two instances on one host keep their own control sockets: gunicorn's default, one path in the home folder,
    would be taken over by the second (and removed when it stops)."""
    from django.conf import settings

    from apps.server.management.commands.serve import control_socket, web_command
    from tests.liveserver import wait_until_serving
    from tests.loopback import stop

    first = live_url.removeprefix("http://")
    command = web_command(first, 2)
    assert command[command.index("--control-socket") + 1] == str(control_socket(first))
    port = free_port()
    second = subprocess.Popen(
        web_command(f"127.0.0.1:{port}", 1, quiet=True), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        wait_until_serving(f"http://127.0.0.1:{port}", second)
        for bind in (first, f"127.0.0.1:{port}"):
            control = control_socket(bind)
            assert control.is_socket() and control.parent == settings.DATA_DIR / "run", bind
            assert stat.S_IMODE(control.parent.stat().st_mode) == 0o700
            assert _listeners(control) == [f"http://{bind}"]  # each answers for its own server
    finally:
        stop(second)
    # the second one's socket went with it; the first one's is still there and still its own
    assert not control_socket(f"127.0.0.1:{port}").exists()
    assert _listeners(control_socket(first)) == [live_url]


# ---------------------------------------------------------------- what gunicorn refuses itself


def _raw(url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send `request` as it is over one connection; the status, headers and body of the answer."""
    import socket

    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(request)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def test_what_the_web_server_refuses_before_django_is_in_the_error_shape_without_an_echo(live_url: str) -> None:
    """A request gunicorn cannot parse, or whose headers are over its limits, is refused by gunicorn itself: JSON in
    the error shape, a fixed message, nothing of the request quoted (its page quoted the offending part)."""
    secret = "s3cret-token-4711"
    cases = {
        "a header over 8 KB": (
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + secret.encode() + b"x" * 9000 + b"\r\n\r\n",
            431, "LIMIT_EXCEEDED",
        ),
        "a bad Content-Length": (
            b"POST /api/v1/ops/list_messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 12" + secret.encode()
            + b"\r\n\r\n{}",
            400, "INVALID_INPUT",
        ),
        "a NUL in a header": (
            b"GET /api/schema HTTP/1.1\r\nHost: 127.0.0.1\r\nX-" + secret.encode() + b": a\x00b\r\n\r\n",
            400, "INVALID_INPUT",
        ),
        "a malformed request line": (b"GET /" + secret.encode() + b" HTTP/9\r\n\r\n", 400, "INVALID_INPUT"),
    }  # fmt: skip
    for case, (request, status, code) in cases.items():
        answered, headers, body = _raw(live_url, request)
        assert (answered, headers["content-type"]) == (status, "application/json"), (case, body[:300])
        error = json.loads(body)["error"]
        assert error["code"] == code and set(error) == {"code", "message"}, case
        assert secret not in body.decode() and "<html" not in body.decode(), case
    # and the server goes on serving
    assert _get(live_url + "/health") == (200, {"status": "ok"})


def test_the_web_servers_log_quotes_no_token_no_query_and_no_refused_request(live_url: str, tmp_path: Path) -> None:
    """What `oaken serve`'s web server logs (its access log and its warnings) leaves out what may be a secret: the
    token of an address-confirmation, password-reset or invitation link (in the address or in the referrer), any
    query, and the part of a request it refused (which quoted a header)."""
    from apps.server.management.commands.serve import web_command
    from tests.liveserver import wait_until_serving
    from tests.loopback import stop

    secret = "tok3n-" + uuid.uuid4().hex
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "web.log"
    with open(log, "w") as output:
        server = subprocess.Popen(
            web_command(f"127.0.0.1:{port}", 1), stdout=output, stderr=subprocess.STDOUT, text=True
        )
    try:
        wait_until_serving(url, server, log=log)
        for path in (f"/accounts/verify/{secret}", f"/invitations/{secret}", f"/accounts/password-reset/MQ/{secret}"):
            referrer = {"Referer": f"{url}/invitations/{secret}?q={secret}"}
            request = urllib.request.Request(url + path, headers=referrer)  # noqa: S310 (loopback URL built here)
            with contextlib.suppress(urllib.error.HTTPError):  # whatever the page answers: what it logged matters
                urllib.request.urlopen(request, timeout=10).close()  # noqa: S310 (loopback URL built here)
        assert _get(f"{url}/health?token={secret}")[0] == 200
        _raw(url, b"GET /api/schema HTTP/1.1\r\nHost: 127.0.0.1\r\nX-" + secret.encode() + b": a\x00b\r\n\r\n")
    finally:
        stop(server)
    logged = log.read_text()
    assert secret not in logged, [line for line in logged.splitlines() if secret in line]
    # and it still says what was asked, and that a request was refused
    assert "GET /invitations/… HTTP/1.1" in logged and "GET /health?… HTTP/1.1" in logged, logged[-2000:]
    assert "Invalid request from ip=127.0.0.1: refused before the application" in logged, logged[-2000:]
