"""The plugin sandbox attacked as an outsider would attack it (issue 34): one hostile package per behaviour.

Each package in tests/plugins/hostile-<what>/ is written from the author's API, the docs and Oaken's source, with
no help from Oaken; installed as a site folder (what OAKEN_PLUGIN_PATH names) and called through the real gate
as two tenants' people and agents. Every test asserts what the plugin got (usually its own report of what it
tried: attempt -> the exception it met), the call's answer and audit event, that /health stays fast, and that
nothing changed in the other tenant. A test passes only while its wall holds.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import django
import pytest
from django.conf import settings
from django.test import Client

from apps.agents.keys import issue_key
from apps.audit.models import AuditEvent
from apps.core.errors import OakenError
from apps.core.kinds import Door
from apps.gate.dispatch import dispatch
from apps.mail.importing import import_mail
from apps.mail.models import Message
from apps.operations import plugin_runtime, plugin_schema, plugins
from apps.operations.plugin_processes import PluginProcess, pools
from apps.operations.registry import registry
from tests.callers import as_agent, as_person, call, membership, refusal
from tests.conftest import Person
from tests.mailfactory import raw_message, write_mbox

PLUGINS_DIR = Path(__file__).parent / "plugins"
BASE_DIR = Path(settings.BASE_DIR)
# the packages most tests call, installed once for the module (see `installed`): folder -> plugin
RESIDENT = {
    "host": "rewriter",
    "files": "snoop",
    "net": "dialer",
    "spawn": "spawner",
    "create": "maker",
    "pth": "early",
    "memo": "memo",
    "covert": "whisper",
    "pipe": "forger",
    "reach": "reacher",
    "hog": "hog",
    "names": "herald",
    "kernel": "kernel",
    "schema": "schemer",
    "vault": "vault",
}
ALICE_SUBJECT, ALICE_BODY = "Alice merger closes Friday", "alice-only-7f3a: the merger closes Friday at nine"
MALLORY_SUBJECT, MALLORY_BODY = "Mallory shopping list", "mallory-only-c0de: eggs and milk"
REFUSED = {"PermissionError", "ProcessLookupError", "FileNotFoundError"}


def hostile(what: str) -> Path:
    return PLUGINS_DIR / f"hostile-{what}"


@pytest.fixture(scope="module")
def installed() -> Iterator[None]:
    loaded = plugins.load_plugins([hostile(what) for what in RESIDENT])
    try:
        assert loaded == sorted(RESIDENT.values()), plugins.status.refused
        yield
    finally:
        for name in RESIDENT.values():
            plugins.unload_plugin(name)


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test() -> Iterator[None]:
    yield
    for name in RESIDENT.values():
        pools.close(name)


@pytest.fixture
def bounds(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """settings.OPERATIONS, changeable for one test (as tests/test_plugins.py does)."""
    changed = dict(settings.OPERATIONS)
    monkeypatch.setattr(settings, "OPERATIONS", changed)
    return changed


# ---------------------------------------------------------------- two tenants, each with one message


@dataclass
class Tenants:
    alice: Person
    mallory: Person
    accounts: dict[str, str]  # person's email -> the id of their account
    before: dict[str, tuple[list[Any], list[Any]]] = field(default_factory=dict)

    def account(self, p: Person) -> str:
        return self.accounts[p.user.email]


def _mail_and_audit(p: Person) -> tuple[list[Any], list[Any]]:
    mail = list(
        Message.objects.for_tenant(p.tenant)
        .order_by("pk")
        .values_list("pk", "subject", "text_body", "read", "pinned", "folder_id", "trashed_from_id")
    )
    events = list(AuditEvent.objects.for_tenant(p.tenant).order_by("seq").values_list("seq", "operation", "outcome"))
    return mail, events


@pytest.fixture
def tenants(alice: Person, mallory: Person, tmp_path: Path, installed: None) -> Tenants:
    accounts = {}
    for p, subject, body in ((alice, ALICE_SUBJECT, ALICE_BODY), (mallory, MALLORY_SUBJECT, MALLORY_BODY)):
        mbox = write_mbox(tmp_path / f"{p.tenant.pk}.mbox", [raw_message(subject=subject, body=body + "\n")])
        import_mail(tenant=p.tenant, workspace=p.workspace, account_name="Personal", path=mbox)
        accounts[p.user.email] = str(call(as_person(p), "list_accounts")["accounts"][0]["id"])
    world = Tenants(alice, mallory, accounts)
    world.before = {p.user.email: _mail_and_audit(p) for p in (alice, mallory)}
    return world


def untouched(world: Tenants, *, called: dict[str, set[str]] | None = None) -> None:
    """Nobody's mail changed, and each tenant's audit gained events only for the plugin operations its own people
    called in the test (`called`: email -> operations)."""
    for p in (world.alice, world.mallory):
        mail, events = _mail_and_audit(p)
        before_mail, before_events = world.before[p.user.email]
        assert mail == before_mail
        assert events[: len(before_events)] == before_events
        allowed = (called or {}).get(p.user.email, set())
        assert {operation for _, operation, _ in events[len(before_events) :]} <= allowed


def health_is_fast(client: Client, most: float = 1.0) -> None:
    started = time.monotonic()
    response = client.get("/health")
    assert response.status_code == 200 and response.json() == {"status": "ok"}
    assert time.monotonic() - started < most


def outcome(p: Person, operation: str) -> str:
    event = AuditEvent.objects.for_tenant(p.tenant).filter(operation=operation).order_by("-seq").first()
    assert event is not None
    return str(event.outcome)


def failed(p: Person, operation: str, input: Any, *, says: str = "") -> OakenError:
    """A call answered PLUGIN_FAILED, and audited so."""
    error = refusal(as_person(p), operation, input)
    assert error.code == "PLUGIN_FAILED", (error.code, error.message)
    assert says in error.message, error.message
    assert outcome(p, operation) == "PLUGIN_FAILED"
    return error


def answered(p: Person, operation: str, input: Any) -> dict[str, Any]:
    output = call(as_person(p), operation, input)
    assert outcome(p, operation) == "ok"
    return output


def postgres_socket() -> str:
    url = urlsplit(os.environ["DATABASE_URL"])
    folder = parse_qs(url.query).get("host", [url.hostname or ""])[0]
    return str(Path(folder) / f".s.PGSQL.{url.port or 5432}")


def redis_socket() -> str:
    return urlsplit(os.environ["REDIS_URL"]).path


def secret_file() -> str:
    return str(Path(settings.DATA_DIR) / "secrets" / "encryption-key")


def refused(tried: dict[str, str], *, allowed: set[str] = REFUSED) -> dict[str, str]:
    """The attempts that met something else than a refusal (empty when every one was refused)."""
    return {attempt: met for attempt, met in tried.items() if met not in allowed}


def idle_process(plugin: str, p: Person) -> PluginProcess:
    found = [process for process in pools.idle(plugin) if process.key == (plugin, str(p.tenant.pk))]
    assert len(found) == 1
    return found[0]


# ---------------------------------------------------------------- 1. the host rewritten from inside


def test_a_plugin_that_rewrites_the_host_gains_nothing(tenants: Tenants, client: Client) -> None:
    alice = tenants.alice
    out = answered(
        alice,
        "rewriter.escape",
        {"secret_file": secret_file(), "socket_path": postgres_socket(), "oaken_pid": os.getpid()},
    )
    # it rewrote what the old guard was made of (module globals, a code object found through gc)...
    assert {"globals", "host._type_of code"} <= set(out["rewritten"])
    # ...and every wall held: they are the kernel's, not code beside the plugin's
    assert out["tried"] == {
        "read the secret": "FileNotFoundError",  # the data folder is not in its filesystem
        "read Oaken's environment": "FileNotFoundError",  # nor any process but its own
        "connect to PostgreSQL": "PermissionError",  # no socket can be made
        "tcp": "PermissionError",
        "fork": "PermissionError",
        "libc fork": "PermissionError",
        "signal Oaken": "ProcessLookupError",
        "write beside the module": "OSError",  # read-only
    }
    # a rewritten host that sends the mail as the exception's name, or one key more in its answer: refused
    error = failed(alice, "rewriter.smuggle", {"account_id": tenants.account(alice)}, says="(Exception)")
    assert "merger" not in error.message.lower()
    failed(alice, "rewriter.extra_key", {"account_id": tenants.account(alice)}, says="not the answer to its request")
    assert not (hostile("host") / "rewritten").exists()
    assert "merger" not in str(list(AuditEvent.objects.for_tenant(alice.tenant).values())).lower()
    health_is_fast(client)
    untouched(tenants, called={alice.user.email: {"rewriter.escape", "rewriter.smuggle", "rewriter.extra_key"}})


# ---------------------------------------------------------------- 2. files


def test_no_file_of_oakens_can_be_read(tenants: Tenants, client: Client) -> None:
    targets = [
        secret_file(),
        str(Path(settings.DATA_DIR) / "secrets" / "django-secret-key"),
        str(BASE_DIR / "config" / "settings" / "base.py"),
        str(BASE_DIR / "apps" / "operations" / "sandbox.py"),
        str(BASE_DIR / "pyproject.toml"),
        str(Path(sys.prefix) / "pyvenv.cfg"),  # Oaken's own environment
        "/etc/passwd",
    ]
    out = answered(tenants.alice, "snoop.read", {"paths": targets, "oaken_pid": os.getpid()})
    tried = out["tried"]
    assert tried.pop("own environment names a server") == "False"
    assert len(tried) == 4 * len(targets) + 5
    assert refused(tried, allowed={"FileNotFoundError", "PermissionError"}) == {}
    # its root holds the system's libraries, /proc of its own, /dev, a /tmp, and the folders leading to the
    # Python installation, the plugin environment and its own package: nothing of Oaken's
    system = {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp", "usr"}
    leading = {Path(p).parts[1] for p in (sys.base_prefix, settings.PLUGIN_ENV, PLUGINS_DIR)}
    assert set(out["root"]) <= system | leading
    health_is_fast(client)
    untouched(tenants, called={tenants.alice.user.email: {"snoop.read"}})


def _snoop_in_a_new_environment(p: Person | None, targets: list[str]) -> dict[str, Any]:
    """snoop loaded again (the plugin environment, with the folders editable installs point at, is read when
    plugins are loaded), then asked to read `targets` as `p`."""
    plugins.unload_plugin("snoop")
    assert plugins.load_plugins([hostile("files")]) == ["snoop"], plugins.status.refused.get("snoop")
    return answered(p, "snoop.read", {"paths": targets, "oaken_pid": os.getpid()}) if p is not None else {}


def test_a_package_cannot_widen_every_plugins_sandbox(
    tenants: Tenants, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hostile-widen is no plugin: metadata saying it is an editable install of Oaken's working folder
    (/proc/self/cwd: no path need be guessed) and of the data folder below it (/proc/self/cwd/var). The sandbox
    mounts the folders editable installs point at into every plugin's filesystem, read-only."""
    monkeypatch.chdir(BASE_DIR)  # Oaken started from its checkout, as `make serve` starts it
    targets = [
        str(BASE_DIR / "config" / "settings" / "base.py"),
        str(BASE_DIR / "pyproject.toml"),
        str(BASE_DIR / "README.md"),
        str(Path(settings.DATA_DIR) / "redis" / "redis.log"),
        secret_file(),
    ]
    planted = plugins.environment().site_packages / "oaken_hostile_widen-0.1.dist-info"
    try:
        # in a folder of OAKEN_PLUGIN_PATH, and installed in the plugin environment itself (pip keeps the
        # direct_url.json a wheel ships when it installs it by name)
        monkeypatch.setattr(settings, "PLUGIN_PATH", [hostile("widen")])
        shutil.copytree(hostile("widen") / "oaken_hostile_widen-0.1.dist-info", planted)
        out = _snoop_in_a_new_environment(tenants.alice, targets)
    finally:
        shutil.rmtree(planted, ignore_errors=True)
        monkeypatch.setattr(settings, "PLUGIN_PATH", [])
        _snoop_in_a_new_environment(None, [])  # the resident snoop, in the environment as it was
    tried = out["tried"]
    tried.pop("own environment names a server")
    assert refused(tried, allowed={"FileNotFoundError", "PermissionError"}) == {}
    health_is_fast(client)
    untouched(tenants, called={tenants.alice.user.email: {"snoop.read"}})


def test_a_package_cannot_stop_every_plugins_sandbox(
    tenants: Tenants, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hostile-widen-root says it is an editable install of /: were / mounted, every plugin's sandbox (bwrap cannot
    mount / over its new root) would fail to start, every plugin with it."""
    planted = plugins.environment().site_packages / "oaken_hostile_widen_root-0.1.dist-info"
    try:
        monkeypatch.setattr(settings, "PLUGIN_PATH", [hostile("widen-root")])
        shutil.copytree(hostile("widen-root") / "oaken_hostile_widen_root-0.1.dist-info", planted)
        out = _snoop_in_a_new_environment(tenants.alice, [secret_file()])
    finally:
        shutil.rmtree(planted, ignore_errors=True)
        monkeypatch.setattr(settings, "PLUGIN_PATH", [])
        _snoop_in_a_new_environment(None, [])
    assert out["tried"][f"open {secret_file()}"] == "FileNotFoundError"
    health_is_fast(client)
    untouched(tenants, called={tenants.alice.user.email: {"snoop.read"}})


# ---------------------------------------------------------------- 3. Oaken's servers


def test_no_server_can_be_reached(tenants: Tenants, client: Client) -> None:
    oaken_site = str(Path(django.__file__).parent.parent)  # Oaken's own environment: psycopg, redis, django
    out = answered(
        tenants.alice,
        "dialer.dial",
        {
            "postgres_socket": postgres_socket(),
            "redis_socket": redis_socket(),
            "site_packages": [oaken_site],
        },
    )
    tried = out["tried"]
    # a network namespace of its own: its loopback (bwrap brings it up) and no route anywhere else
    assert out["interfaces"] == ["lo"] and tried.pop("routes") == "0"
    assert tried.pop("addresses") in {"0", "1"}  # ::1 of its own loopback at most
    # the unix pair reaches itself only (asyncio needs one); everything else is refused before it is made
    assert tried.pop("unix socketpair, then out") in {"ConnectionRefusedError", "FileNotFoundError", "OSError"}
    assert tried.pop("cffi socket") in {"PermissionError", "ModuleNotFoundError"}
    for name in ("import psycopg", "import redis", "import django"):
        assert tried.pop(name) == "ModuleNotFoundError", name  # not in its filesystem at all
    assert refused(tried, allowed={"PermissionError"}) == {}
    health_is_fast(client)
    untouched(tenants, called={tenants.alice.user.email: {"dialer.dial"}})


def test_a_system_call_of_another_abi_ends_the_process(tenants: Tenants, client: Client) -> None:
    """x32 numbers (bit 30 set) and i386's `int 0x80` are other architectures to the filter: it kills."""
    alice = tenants.alice
    for operation in ("dialer.x32", "dialer.i386"):
        first = answered(alice, "dialer.pid", {})["tried"]["token"]
        failed(alice, operation, {}, says="process ended")
        assert answered(alice, "dialer.pid", {})["tried"]["token"] != first  # a new process
    health_is_fast(client)
    untouched(tenants, called={alice.user.email: {"dialer.x32", "dialer.i386", "dialer.pid"}})


# ---------------------------------------------------------------- 4. processes


def test_no_process_can_be_started(tenants: Tenants, client: Client) -> None:
    out = answered(tenants.alice, "spawner.spawn", {})
    tried = out["tried"]
    assert tried.pop("clone3") == "OSError"  # ENOSYS: threads fall back to clone, whose flags the filter reads
    assert tried.pop("os.system") == "OSError"  # the shell could not be started (status 127)
    assert refused(tried, allowed={"PermissionError", "OSError"}) == {}
    assert out["pid"] == 2  # in a PID namespace of its own, under bwrap's init
    health_is_fast(client)
    untouched(tenants, called={tenants.alice.user.email: {"spawner.spawn"}})


def test_a_plugin_that_replaces_itself_stays_inside(tenants: Tenants, client: Client) -> None:
    """execv is allowed: the program it becomes answers the call itself, from the same sandbox."""
    out = answered(tenants.alice, "spawner.exec", {"secret_file": secret_file(), "postgres_socket": postgres_socket()})
    tried = out["tried"]
    assert int(tried.pop("after exec: uid")) not in (0, os.getuid())
    assert tried == {
        "after exec: read the secret": "FileNotFoundError",
        "after exec: connect to PostgreSQL": "PermissionError",
        "after exec: fork": "PermissionError",
        "after exec: write beside the plugin": "OSError",
    }
    assert not (hostile("spawn") / "exec-wrote-here").exists()
    health_is_fast(client)
    untouched(tenants, called={tenants.alice.user.email: {"spawner.exec"}})


# ---------------------------------------------------------------- 5. files and device nodes


def test_only_a_private_bounded_tmp_is_writable(tenants: Tenants, client: Client, bounds: dict[str, int]) -> None:
    alice, mallory = tenants.alice, tenants.mallory
    tried = answered(alice, "maker.make", {})["tried"]
    assert tried.pop("write /tmp") == "worked"
    assert tried.pop("sqlite in /tmp") == "worked"
    assert tried == {
        "sqlite beside the module": "OperationalError",
        "mkfifo in /tmp": "PermissionError",
        "mknod /dev/null in /tmp": "PermissionError",
        "mknod /dev/kmsg in /tmp": "PermissionError",
        "write beside the module": "OSError",  # EROFS
        "write /": "PermissionError",
        "write /dev/shm": "PermissionError",
        "write /dev": "PermissionError",
        "write the Python installation": "OSError",
        "a file of 64 MB in /tmp": "OSError",  # EFBIG: past PLUGIN_FILE_MAX_MB
        "fill /tmp with 1 MB files": "OSError",  # ENOSPC: /tmp holds PLUGIN_FILE_MAX_MB
        "hard link to the module": "OSError",  # EXDEV: its /tmp is a file system of its own
    }
    assert not list(hostile("create").glob("made-here")) and not list(hostile("create").glob("*.sqlite3"))
    # /tmp is its process's own: another tenant's process, and a later process of the same tenant, find nothing
    pools.close("maker")
    assert answered(alice, "maker.note", {"text": ALICE_SUBJECT})["found"] == []
    assert answered(alice, "maker.note", {"text": "again"})["found"] == [ALICE_SUBJECT]  # the same process
    assert answered(mallory, "maker.note", {"text": "mallory"})["found"] == []
    pools.close("maker")
    assert answered(alice, "maker.note", {"text": "after"})["found"] == []
    health_is_fast(client)
    untouched(tenants, called={alice.user.email: {"maker.make", "maker.note"}, mallory.user.email: {"maker.note"}})


# ---------------------------------------------------------------- 6. code before the plugin's


def test_pth_and_sitecustomize_never_run_in_an_oaken_process(
    tenants: Tenants, client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = hostile("pth")
    marker = tmp_path / "ran"
    # in the sandbox the .pth file runs (the folder is a site folder there); it could leave no mark
    ran = answered(tenants.alice, "early.ran", {})
    assert ran == {"pth": True, "sitecustomize": False, "marker": "OSError"}
    # this process loaded the package (the module fixture) and never ran either file
    assert "OAKEN_HOSTILE_PTH_RAN" not in os.environ and "OAKEN_HOSTILE_SITECUSTOMIZE_RAN" not in os.environ
    assert "oaken_hostile_pth_early" not in sys.modules
    assert not list(folder.glob("ran-*"))
    # a fresh Oaken process that loads plugins from that folder (OAKEN_PLUGIN_PATH) at start
    env = {**os.environ, "OAKEN_PLUGIN_PATH": str(folder), "OAKEN_HOSTILE_MARKER": str(marker)}
    checked = subprocess.run(
        [str(Path(sys.prefix) / "bin" / "oaken"), "check"], env=env, cwd=BASE_DIR, capture_output=True, timeout=120
    )
    assert checked.returncode == 0, checked.stderr.decode()[-2000:]
    assert not marker.exists() and not list(folder.glob("ran-*"))
    # the mark is real: Oaken's Python that makes the folder a site folder runs the .pth file and leaves it
    subprocess.run(
        [sys.executable, "-c", f"import site; site.addsitedir({str(folder)!r})"], env=env, check=True, timeout=60
    )
    assert marker.read_text().split()[1] == sys.executable
    health_is_fast(client)
    untouched(tenants, called={tenants.alice.user.email: {"early.ran"}})


# ---------------------------------------------------------------- 7. one tenant per process; the pipe


def test_a_module_global_never_hands_one_tenants_mail_to_another(tenants: Tenants, client: Client) -> None:
    alice, mallory = tenants.alice, tenants.mallory
    seen: dict[str, list[dict[str, Any]]] = {alice.user.email: [], mallory.user.email: []}
    for p in (alice, mallory, alice, mallory, alice, mallory, alice, mallory):
        seen[p.user.email].append(answered(p, "memo.remember", {"account_id": tenants.account(p)}))
    alices, mallorys = seen[alice.user.email], seen[mallory.user.email]
    assert all(ALICE_BODY in str(out) for out in alices) and all(MALLORY_BODY in str(out) for out in mallorys)
    # 4 of 4 calls: mallory never meets alice's mail, nor alice mallory's
    assert not [out for out in mallorys if "alice" in str(out).lower()]
    assert not [out for out in alices if "mallory" in str(out).lower()]
    assert not {out["process"] for out in alices} & {out["process"] for out in mallorys}
    health_is_fast(client)
    untouched(tenants, called={alice.user.email: {"memo.remember"}, mallory.user.email: {"memo.remember"}})


def test_shared_files_carry_nothing_from_one_tenant_to_another(tenants: Tenants, client: Client) -> None:
    """Record locks and inotify watches on the files every sandbox of the plugin shares (read-only) would be a
    message board between tenants' processes, even while one of them is stopped."""
    alice, mallory = tenants.alice, tenants.mallory
    first = answered(mallory, "whisper.listen", {"account_id": tenants.account(mallory)})  # watches set, then idle
    leaked = answered(alice, "whisper.leak", {"account_id": tenants.account(alice)})
    heard = answered(mallory, "whisper.listen", {"account_id": tenants.account(mallory)})
    assert (heard["locks"], heard["opens"]) == ("", ""), (first, leaked, heard)
    assert "merger" not in str(heard).lower()
    # how: no watch can be set (inotify is refused); a lock is pretended (it succeeds and locks nothing)
    assert first["tried"]["watch"] == "PermissionError"
    assert leaked["tried"] == {"locks": "worked", "flock": "worked"}
    health_is_fast(client)
    untouched(tenants, called={alice.user.email: {"whisper.leak"}, mallory.user.email: {"whisper.listen"}})


def test_lines_out_of_turn_never_reach_a_caller(tenants: Tenants, client: Client, bounds: dict[str, int]) -> None:
    bounds["PLUGIN_CRASHES_MAX"] = 100  # each forgery ends a process: the plugin is not to turn unhealthy here
    alice, mallory = tenants.alice, tenants.mallory
    mine, theirs = {"account_id": tenants.account(alice)}, {"account_id": tenants.account(mallory)}
    answers: list[Any] = []

    def who(p: Person, mail: dict[str, str]) -> None:
        try:
            answers.append(call(as_person(p), "forger.who", mail))
        except OakenError as error:
            answers.append(error.code)

    # its answer and three forged ones in one write; an answer under a guessed id (then it hangs): each fails the
    # call, and its process is ended
    failed(alice, "forger.extra", mine, says="wrote more than its answer")
    started = time.monotonic()
    failed(alice, "forger.guess", mine, says="not the answer to its request")
    assert time.monotonic() - started < 5
    # its own answer under the right id (read from the host's frame: it is the plugin's answer to give), then the
    # host's: the second line fails the call if Oaken reads both at once, else ends the process before its next use
    try:
        own: dict[str, Any] | str = call(as_person(alice), "forger.own", mine)
    except OakenError as error:
        own = error.code
    if isinstance(own, dict):
        assert own["said"] == "own answer"
        assert answered(alice, "forger.who", mine)["process"] != own["process"]
    else:
        assert (own, outcome(alice, "forger.own")) == ("PLUGIN_FAILED", "PLUGIN_FAILED")
    # what it writes to fd 1 (print, os.write) goes nowhere: the host keeps the pipe to itself
    assert answered(alice, "forger.stdout", mine)["said"] == "answered"
    # a thread that writes forged answers once the call is over, and on: a process left with more threads than
    # it had when ready is ended after its answer, so no later call ever wakes it, however the threads are run
    later = answered(alice, "forger.later", mine)["process"]
    time.sleep(0.5)
    for _ in range(3):
        who(alice, mine)
        who(mallory, theirs)
    texts = [json.dumps(a) for a in answers]
    assert not [t for t in texts if "merger" in t.lower()]
    assert all(a != "PLUGIN_FAILED" and a["said"] == "me" and a["process"] != later for a in answers)
    health_is_fast(client)
    untouched(
        tenants,
        called={
            alice.user.email: {f"forger.{op}" for op in ("extra", "own", "guess", "stdout", "later", "who")},
            mallory.user.email: {"forger.who"},
        },
    )


# ---------------------------------------------------------------- 8. Oaken's processes; limits


def test_oakens_own_processes_are_out_of_reach(tenants: Tenants, client: Client) -> None:
    me = os.getpid()
    limits, nice, cpus = resource.prlimit(me, resource.RLIMIT_CORE), os.getpriority(os.PRIO_PROCESS, me), None
    cpus = os.sched_getaffinity(me)
    tried = answered(tenants.alice, "reacher.reach", {"oaken_pid": me})["tried"]
    assert refused(tried, allowed={"ProcessLookupError", "PermissionError", "FileNotFoundError"}) == {}
    assert resource.prlimit(me, resource.RLIMIT_CORE) == limits
    assert os.getpriority(os.PRIO_PROCESS, me) == nice and os.sched_getaffinity(me) == cpus
    health_is_fast(client)
    untouched(tenants, called={tenants.alice.user.email: {"reacher.reach"}})


def test_memory_past_the_bound_fails_the_call_and_replaces_the_process(
    tenants: Tenants, client: Client, bounds: dict[str, int]
) -> None:
    bounds["PLUGIN_MEMORY_MAX_MB"] = 256
    alice = tenants.alice
    first = answered(alice, "hog.token", {})["process"]
    failed(alice, "hog.memory", {"n": 400}, says="(MemoryError)")
    assert answered(alice, "hog.token", {})["process"] != first
    health_is_fast(client)
    untouched(tenants, called={alice.user.email: {"hog.token", "hog.memory"}})


def test_memory_the_address_space_bound_does_not_count_is_refused(
    tenants: Tenants, client: Client, bounds: dict[str, int]
) -> None:
    """System V shared memory and message queues, and memfd files, hold pages outside the process's address
    space: a process could keep any amount while staying under PLUGIN_MEMORY_MAX_MB, idle in its pool."""
    bounds["PLUGIN_MEMORY_MAX_MB"] = 256
    bounds["PLUGIN_TIMEOUT_SECONDS"] = 30
    out = answered(tenants.alice, "hog.hidden", {"n": 400})
    assert refused(out["tried"], allowed={"PermissionError"}) == {}
    health_is_fast(client)
    untouched(tenants, called={tenants.alice.user.email: {"hog.hidden"}})


def test_cpu_past_the_bound_fails_the_call_and_replaces_the_process(
    tenants: Tenants, client: Client, bounds: dict[str, int]
) -> None:
    bounds["PLUGIN_CPU_SECONDS"] = 1
    bounds["PLUGIN_TIMEOUT_SECONDS"] = 20
    alice = tenants.alice
    first = answered(alice, "hog.token", {})["process"]
    started = time.monotonic()
    failed(alice, "hog.burn", {"n": 10}, says="more than 1 s of CPU time")
    assert time.monotonic() - started < 5
    assert answered(alice, "hog.token", {})["process"] != first
    health_is_fast(client)
    untouched(tenants, called={alice.user.email: {"hog.token", "hog.burn"}})


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_process_that_leaves_a_thread_running_is_ended_not_kept(
    tenants: Tenants, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = tenants.alice
    given: list[PluginProcess] = []
    give = pools.give

    def recorded(process: PluginProcess, **kw: Any) -> None:
        given.append(process)
        give(process, **kw)

    monkeypatch.setattr(pools, "give", recorded)
    first = answered(alice, "hog.token", {})["process"]
    assert answered(alice, "hog.token", {})["process"] == first  # a process that started no thread is kept
    spun = answered(alice, "hog.spin", {})["process"]
    assert spun == first and not given[-1].alive  # its thread burns nowhere: the process is gone
    assert [p for p in pools.idle("hog") if p.key == ("hog", str(alice.tenant.pk))] == []
    assert answered(alice, "hog.token", {})["process"] != first
    idle = idle_process("hog", alice)
    spent = _cpu_seconds(idle.pid)
    time.sleep(0.5)
    assert _cpu_seconds(idle.pid) - spent < 0.05
    assert Path(f"/proc/{idle.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"  # stopped between calls
    health_is_fast(client)
    untouched(tenants, called={alice.user.email: {"hog.token", "hog.spin"}})


def test_a_thread_bomb_is_bounded(tenants: Tenants, client: Client, bounds: dict[str, int]) -> None:
    bounds["PLUGIN_THREADS_MAX"] = 8
    out = answered(tenants.alice, "hog.threads", {"n": 1000})
    assert out["took"] < 8 and int(out["tried"]["alive"]) <= 8
    health_is_fast(client)
    untouched(tenants, called={tenants.alice.user.email: {"hog.threads"}})


def test_a_huge_answer_fails_the_call_and_replaces_the_process(
    tenants: Tenants, client: Client, bounds: dict[str, int]
) -> None:
    bounds["PLUGIN_ANSWER_MAX_BYTES"] = 64 * 1024
    alice = tenants.alice
    first = answered(alice, "hog.token", {})["process"]
    failed(alice, "hog.huge", {"n": 1_000_000}, says="too large")
    assert answered(alice, "hog.token", {})["process"] != first
    health_is_fast(client)
    untouched(tenants, called={alice.user.email: {"hog.token", "hog.huge"}})


def test_an_answer_nested_too_deep_fails_the_call_and_replaces_the_process(tenants: Tenants, client: Client) -> None:
    """100,000 brackets (200 kB, well within the size bound) that Python's JSON reader cannot nest."""
    alice = tenants.alice
    first = answered(alice, "hog.token", {})["process"]
    process, held = idle_process("hog", alice), pools._count
    failed(alice, "hog.deep", {"n": 100_000}, says="not JSON")
    # the process was ended and counted out, not left running (and not stopped) outside the pool
    assert not process.alive and pools._count == held - 1
    assert answered(alice, "hog.token", {})["process"] != first
    health_is_fast(client)
    untouched(tenants, called={alice.user.email: {"hog.token", "hog.deep"}})


# ---------------------------------------------------------------- 9. names and words a plugin controls


def test_an_exceptions_type_name_carries_no_mail(tenants: Tenants, client: Client) -> None:
    """A class named after the mail's subject, claiming to be a built-in (even placed in `builtins`)."""
    alice, mine = tenants.alice, {"account_id": tenants.account(tenants.alice)}
    assert failed(alice, "herald.raise_named", mine).message == "the plugin failed (Exception)"
    # a ValueError of its own naming, made a built-in in its process: named as Oaken's built-ins know it
    assert failed(alice, "herald.raise_subclass", mine).message in {
        "the plugin failed (Exception)",
        "the plugin failed (ValueError)",
    }
    events = list(AuditEvent.objects.for_tenant(alice.tenant).values())
    assert "merger" not in str(events).lower()
    health_is_fast(client)
    untouched(tenants, called={alice.user.email: {"herald.raise_named", "herald.raise_subclass"}})


def _mcp(client: Client, key: str, method: str, params: dict[str, Any] | None = None) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, **({"params": params} if params else {})}
    response = client.generic(
        "POST",
        "/mcp",
        json.dumps(body),
        content_type="application/json",
        HTTP_ACCEPT="application/json, text/event-stream",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert response.status_code == 200, response.content
    return response.json()["result"]


def _agent_key(p: Person, scopes: list[str]) -> str:
    return issue_key(membership=membership(p), scopes=scopes, workspaces=["default"], allow_list=None, expires_at=None)[
        1
    ]


def _expose(p: Person, target: str) -> None:
    dispatch(as_person(p), Door.UI, "set_operation_exposure", {"operation": target, "level": "on"}, confirm=True)


def _strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, sub in value.items():
            yield from _strings(key, f"{path}.{key}(name)")
            yield from _strings(sub, f"{path}.{key}")
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            yield from _strings(sub, f"{path}[{i}]")


def _plain(text: str, most: int) -> bool:
    return len(text) <= most and all(c.isprintable() for c in text)


def test_a_plugins_words_reach_agents_and_admins_plain_and_short(tenants: Tenants, client: Client) -> None:
    alice = tenants.alice
    _expose(alice, "plugin:herald")
    tools = {t["name"]: t for t in _mcp(client, _agent_key(alice, ["read"]), "tools/list")["tools"]}
    tool = tools["herald.raise_named"]
    summary, _, ours = tool["description"].partition("\n\n")
    assert _plain(summary, plugin_schema.SUMMARY_MAX_CHARS) and "<system>" in summary  # its words, made plain
    assert ours.startswith("An operation of the plugin herald") and _plain(ours, 400)
    field = tool["inputSchema"]["properties"]["account_id"]
    for words in (field["title"], field["description"]):
        assert _plain(words, plugin_schema.WORDS_MAX_CHARS)
    listed = {p["name"]: p for p in call(as_person(alice), "list_plugins")["plugins"]}["herald"]
    assert _plain(listed["version"], 40)
    assert _plain(listed["operations"][0]["summary"], plugin_schema.SUMMARY_MAX_CHARS)
    endpoint = listed["settings_schema"]["properties"]["endpoint"]
    assert _plain(endpoint["title"], plugin_schema.WORDS_MAX_CHARS)
    assert _plain(endpoint["description"], plugin_schema.WORDS_MAX_CHARS)
    health_is_fast(client)


def test_every_string_of_a_plugins_schema_reaches_agents_plain_and_short(tenants: Tenants, client: Client) -> None:
    """Not only titles and descriptions: a default, an enum value, an example or a keyword of the plugin's own
    (x-note) are its words too, in the tool list an agent reads."""
    alice = tenants.alice
    _expose(alice, "plugin:herald")
    tools = {t["name"]: t for t in _mcp(client, _agent_key(alice, ["read"]), "tools/list")["tools"]}
    schema = tools["herald.raise_named"]["inputSchema"]
    loud = {path: text[:60] for path, text in _strings(schema) if not _plain(text, plugin_schema.WORDS_MAX_CHARS)}
    assert loud == {}
    listed = {p["name"]: p for p in call(as_person(alice), "list_plugins")["plugins"]}["herald"]
    loud = {p: t[:60] for p, t in _strings(listed["settings_schema"]) if not _plain(t, plugin_schema.WORDS_MAX_CHARS)}
    assert loud == {}


def test_mail_text_anywhere_in_a_plugins_output_is_fenced(tenants: Tenants, client: Client) -> None:
    """Every string a plugin returns is mail text: in a dict's values and a tuple's items as much as in a field."""
    alice = tenants.alice
    _expose(alice, "plugin:schemer")
    result = _mcp(
        client,
        _agent_key(alice, ["read"]),
        "tools/call",
        {"name": "schemer.hide", "arguments": {"account_id": tenants.account(alice)}},
    )
    content = result["structuredContent"]
    unfenced = [path for path, text in _strings(content) if ALICE_BODY in text and not text.startswith("[untrusted:")]
    assert unfenced == []
    health_is_fast(client)


def test_an_impostor_of_the_calendar_refuses_both(
    tenants: Tenants, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second package naming its entry point `calendar`, as Oaken starts with it installed (OAKEN_PLUGIN_PATH)."""
    alice = tenants.alice
    if plugin_runtime.runtime("calendar") is None:
        pytest.fail("the calendar plugin is not installed (make installs plugins/oaken-calendar)")
    _expose(alice, "plugin:calendar")
    agent = as_agent(alice)
    plugins.unload_plugin("calendar")
    try:
        monkeypatch.setattr(settings, "PLUGIN_PATH", [hostile("impostor")])
        loaded = plugins.load_plugins()
        assert "calendar" not in loaded
        reason = plugins.status.refused["calendar"]
        assert "2 packages claim the name calendar" in reason and "neither is loaded" in reason
        assert not [op for op in registry if op.name.startswith("calendar.")]
        listed = call(as_person(alice), "list_plugins")
        assert "calendar" not in {p["name"] for p in listed["plugins"]}
        assert {r["name"]: r["reason"] for r in listed["refused"]}["calendar"] == reason
        # the exposure the admin gave `calendar` serves no one
        error = refusal(agent, "calendar.list_invites", {"account_id": tenants.account(alice)})
        assert error.code in {"NOT_FOUND", "NOT_AVAILABLE"}
        assert "IMPOSTOR" not in str(error.as_dict())
    finally:
        monkeypatch.setattr(settings, "PLUGIN_PATH", [])
        plugins.status.refused.pop("calendar", None)
        plugins.load_plugins([plugins.environment().site_packages])
    assert plugin_runtime.runtime("calendar") is not None and plugin_runtime.runtime("calendar").version == "1.0.0"  # type: ignore[union-attr]
    health_is_fast(client)


# ---------------------------------------------------------------- 10. secrets in settings


def test_secrets_nested_or_in_lists_are_never_shown(tenants: Tenants, client: Client) -> None:
    alice = tenants.alice
    values = {
        "account": {"user": "alice", "password": "hunter2-nested"},
        "tokens": ["tok-in-a-list"],
        "keys": {"api": "key-in-a-dict"},
        "maybe": "optional-secret",
    }
    out = dispatch(
        as_person(alice), Door.UI, "set_plugin_settings", {"plugin": "vault", "settings": values}, confirm=True
    ).output
    listed = {p["name"]: p for p in call(as_person(alice), "list_plugins")["plugins"]}["vault"]
    for shown in (out["settings"], listed["settings"]):
        text = json.dumps(shown)
        assert not [secret for secret in ("hunter2", "tok-in", "key-in", "optional-secret") if secret in text]
    assert call(as_person(alice), "vault.count", {}) == {"said": "3"}  # they were kept, only not shown


# ---------------------------------------------------------------- 11. slow plugins


def test_a_plugin_hanging_at_import_or_in_describe_delays_start_up_by_its_bound(
    client: Client, alice: Person, bounds: dict[str, int]
) -> None:
    bounds["PLUGIN_START_SECONDS"] = 1
    started = time.monotonic()
    loaded = plugins.load_plugins([hostile("slow-import"), hostile("slow-describe")])
    elapsed = time.monotonic() - started
    try:
        assert loaded == []
        assert elapsed < 1 + 2.5  # described at once, each within its bound (and a process start)
        assert "did not answer within 1 s" in plugins.status.refused["slow_import"]
        assert "did not answer within 1 s" in plugins.status.refused["slow_describe"]
        started = time.monotonic()
        refused = {r["name"] for r in call(as_person(alice), "list_plugins")["refused"]}
        assert {"slow_import", "slow_describe"} <= refused and time.monotonic() - started < 1
        health_is_fast(client)
    finally:
        for name in ("slow_import", "slow_describe"):
            plugins.unload_plugin(name)


def test_a_plugin_hanging_in_its_health_check_delays_nothing(
    client: Client, alice: Person, bounds: dict[str, int]
) -> None:
    bounds["PLUGIN_START_SECONDS"] = 1
    bounds["PLUGIN_TIMEOUT_SECONDS"] = 5
    bounds["PLUGIN_HEALTH_SECONDS"] = 1
    bounds["PLUGIN_PROCESSES_MAX"] = 64  # every plugin's health turns stale too: room for all their checks
    started = time.monotonic()
    loaded = plugins.load_plugins([hostile("slow-health")])
    elapsed = time.monotonic() - started
    bounds["PLUGIN_START_SECONDS"] = 15  # the other plugins' checks start processes too, all at once
    # a look that waited for the hanging check would wait its whole timeout: 30 s against the few milliseconds a
    # look takes, so the bound below tells the two apart on a machine however loaded
    bounds["PLUGIN_TIMEOUT_SECONDS"] = 30
    try:
        time.sleep(1.1)  # its health is stale: the next look starts a check in the background
        for _ in range(3):
            started = time.monotonic()
            listed = call(as_person(alice), "list_plugins")
            assert time.monotonic() - started < 10, "the look waited for the hanging health check"
            health_is_fast(client, most=10)
        assert {p["name"]: p["healthy"] for p in listed["plugins"]}.get("slow_health") is False
        if loaded:
            assert refusal(as_person(alice), "slow_health.hello", {}).code == "NOT_AVAILABLE"
        assert elapsed < 1 + 2.5, f"start-up waited {elapsed:.1f} s for a health check"
    finally:
        plugins.unload_plugin("slow_health")


@pytest.mark.django_db(transaction=True)
def test_calls_past_the_in_flight_bound_are_refused_at_once(
    client: Client, alice: Person, mallory: Person, bounds: dict[str, int]
) -> None:
    bounds["PLUGIN_CALLS_IN_FLIGHT"] = 2
    bounds["PLUGIN_TIMEOUT_SECONDS"] = 3
    assert plugins.load_plugins([hostile("slow-call")]) == ["slow_call"]
    found = plugin_runtime.runtime("slow_call")
    assert found is not None
    errors: list[str] = []

    def hang(p: Person) -> None:
        try:
            call(as_person(p), "slow_call.hang", {})
        except OakenError as error:
            errors.append(error.code)

    try:
        hanging = [threading.Thread(target=hang, args=(p,)) for p in (alice, mallory)]
        for thread in hanging:
            thread.start()
        deadline = time.monotonic() + 10
        while found._in_flight < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        started = time.monotonic()
        error = refusal(as_person(alice), "slow_call.hang", {})
        assert error.code == "SERVICE_UNAVAILABLE" and time.monotonic() - started < 0.5
        assert outcome(alice, "slow_call.hang") == "SERVICE_UNAVAILABLE"
        started = time.monotonic()
        call(as_person(alice), "list_plugins")
        assert time.monotonic() - started < 1
        health_is_fast(client)
        for thread in hanging:
            thread.join(10)
        assert errors == ["PLUGIN_FAILED", "PLUGIN_FAILED"]
    finally:
        plugins.unload_plugin("slow_call")


# ---------------------------------------------------------------- 12. the rest of the kernel


def test_the_kernels_other_doors_are_shut(tenants: Tenants, client: Client) -> None:
    out = answered(tenants.alice, "kernel.probe", {})
    tried = out["tried"]
    # pid 1 is bwrap's init (root's, or the user namespace's owner), whose root and environment are out of reach
    assert tried.pop("/proc/1/root") == "PermissionError"
    assert tried.pop("/proc/1/environ") == "PermissionError"
    assert tried.pop("its parent is the sandbox's init") == "True"
    assert tried.pop("other processes") == "['1']"
    assert tried.pop("open a pty") == "worked"  # a pty of its own devpts, reaching nothing
    assert tried.pop("controlling terminal") == "OSError"  # ENXIO: a session of its own, no terminal
    assert tried.pop("exec with a huge argv") == "OSError"  # E2BIG
    for name in ("write /proc/self/attr/current", "write /proc/self/mem"):
        assert tried.pop(name) in {"OSError", "PermissionError"}
    assert refused(tried) == {}
    assert set(out["dev"]) <= {"core", "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin"} | {
        "stdout",
        "tty",
        "urandom",
        "zero",
    }
    assert out["uid"] not in (0, os.getuid())
    assert out["capabilities"].split()[0] == "0000000000000000" and out["no_new_privs"] == "1"
    assert out["suid_mounts"] == []
    # inherited from Oaken: its stdin and stdout pipes and /dev/null, nothing else (the listing's own descriptor
    # shows as the folder it reads)
    assert set(out["descriptors"]) <= {"pipe:", "/dev/null", "/proc/self/fd", "/proc/1/fd"}
    health_is_fast(client)
    untouched(tenants, called={tenants.alice.user.email: {"kernel.probe"}})


# ---------------------------------------------------------------- Oaken's own work on what a plugin says


def test_an_answer_that_makes_a_pattern_backtrack_does_not_hold_oaken(tenants: Tenants, client: Client) -> None:
    """The plugin's output schema carries ^(a+)+$ and its answer is 27 a's and a '!': Python's re, checking the
    answer in Oaken's own process (holding the GIL, inside the call's transaction), takes seconds per a more."""
    alice = tenants.alice
    answered(alice, "schemer.hide", {"account_id": tenants.account(alice)})  # its process is up: time Oaken only
    started = time.monotonic()
    error = refusal(as_person(alice), "schemer.backtrack", {"n": 27})
    assert error.code == "PLUGIN_FAILED" and "did not match its output schema" in error.message
    assert time.monotonic() - started < 2, f"Oaken spent {time.monotonic() - started:.1f} s on one answer"
    health_is_fast(client)


def test_a_schema_that_multiplies_when_resolved_does_not_hold_start_up(
    client: Client, alice: Person, bounds: dict[str, int]
) -> None:
    """1.5 kB of schema whose references resolve to 4 ** 7 leaves: Oaken checks the resolved schema for seconds
    (6 ** 7 holds it for minutes), in every process that loads plugins, before it serves or runs a command."""
    bounds["PLUGIN_START_SECONDS"] = 5  # time enough to describe itself: what is timed is Oaken's work after
    started = time.monotonic()
    try:
        loaded = plugins.load_plugins([hostile("refbomb")])
        elapsed = time.monotonic() - started
        assert elapsed < 3, f"start-up took {elapsed:.1f} s"
        assert loaded == [] and "refbomb" in plugins.status.refused
    finally:
        plugins.unload_plugin("refbomb")
    health_is_fast(client)
