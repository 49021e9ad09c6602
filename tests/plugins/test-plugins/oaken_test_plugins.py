"""Plugins the tests install for themselves (tests/test_plugins.py), a package as pip lays one out in a site folder."""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import sys
import time
from pathlib import Path

from oaken_plugin import Closed, MailText, Plugin, Service
from pydantic import Field, SecretStr

# ---------------------------------------------------------------- probe: what can a plugin reach?

probe = Plugin(name="probe", version="0.1")


class ProbeIn(Closed):
    socket_path: str = Field(default="", max_length=500, description="a PostgreSQL socket to try")
    secret_file: str = Field(default="", max_length=500, description="a file of Oaken's to try to read")


class ProbeOut(Closed):
    tried: dict[str, str]
    environment: list[str]


def _attempt(what: object) -> str:
    try:
        result = what() if callable(what) else what
    except BaseException as exc:
        return type(exc).__name__
    return f"worked: {str(result)[:40]}"


@probe.operation(name="reach", summary="Try to reach Oaken's data.", input=ProbeIn, output=ProbeOut)
def reach(service: Service, data: ProbeIn) -> ProbeOut:
    def database() -> object:
        import django.db  # noqa: F401

        return "imported django.db"

    def connect() -> object:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(data.socket_path)
        return "connected"

    def tcp() -> object:
        return socket.create_connection(("127.0.0.1", 5432), timeout=1)

    def parent_environment() -> object:
        return Path(f"/proc/{os.getppid()}/environ").read_bytes()

    def spawn() -> object:
        import subprocess

        return subprocess.run(["/bin/true"], check=False)

    def write() -> object:
        return Path(__file__).with_name("wrote-here").write_text("x")

    tried = {
        "import django.db": _attempt(database),
        "import psycopg": _attempt(lambda: __import__("psycopg")),
        "postgres socket": _attempt(connect),
        "tcp": _attempt(tcp),
        "secret file": _attempt(lambda: Path(data.secret_file).read_bytes()),
        "parent environment": _attempt(parent_environment),
        "subprocess": _attempt(spawn),
        "write a file": _attempt(write),
        "DATABASE_URL": str(os.environ.get("DATABASE_URL")),
        "time zone data": _attempt(lambda: Path("/etc/localtime").read_bytes()[:4].decode()),
    }
    return ProbeOut(tried=tried, environment=sorted(os.environ))


# ---------------------------------------------------------------- raiser, sleeper, sick

raiser = Plugin(name="raiser", version="0.1")


class Empty(Closed):
    seconds: float = Field(default=0, ge=0, le=60)


class Said(Closed):
    said: MailText


@raiser.operation(name="boom", summary="Raise with mail in the message.", input=Empty, output=Said)
def boom(service: Service, data: Empty) -> Said:
    raise ValueError("Dear Alice, the secret merger closes Friday")


sleeper = Plugin(name="sleeper", version="0.1")
# every process is the first of its own PID namespace (pid 1): a process is told apart by a token of its own
_PROCESS = secrets.token_hex(8)


@sleeper.operation(name="nap", summary="Sleep, then answer.", input=Empty, output=Said)
def nap(service: Service, data: Empty) -> Said:
    time.sleep(data.seconds)
    return Said(said=f"slept {data.seconds:g} s in process {_PROCESS}")


@sleeper.operation(name="die", summary="End the process.", input=Empty, output=Said)
def die(service: Service, data: Empty) -> Said:
    sys.stdout.flush()
    os._exit(1)


_SICK_FLAG = Path(__file__).with_name("sick.flag")


def _sick_health() -> bool:
    return not _SICK_FLAG.exists()


sick = Plugin(name="sick", version="0.1", health=_sick_health)


@sick.operation(name="hello", summary="Say hello.", input=Empty, output=Said)
def hello(service: Service, data: Empty) -> Said:
    return Said(said="hello")


# ---------------------------------------------------------------- settings


class KeySettings(Closed):
    api_key: str = Field(default="", json_schema_extra={"format": "password", "writeOnly": True})
    region: str = Field(default="eu", pattern="^(eu|us)$")


keyed = Plugin(name="keyed", version="0.1", settings=KeySettings)


@keyed.operation(name="whoami", summary="Which region it is set for.", input=Empty, output=Said)
def whoami(service: Service, data: Empty) -> Said:
    settings = KeySettings.model_validate(service.settings.model_dump())
    return Said(said=f"{settings.region} {'with' if settings.api_key else 'without'} a key")


# ---------------------------------------------------------------- vault: secrets nested, in lists, in dicts


class Server(Closed):
    """A server the plugin signs in to."""

    host: str = Field(
        default="", max_length=100, pattern=r"^[a-z0-9.-]*$", title="Host name", description="Like imap.example.test."
    )
    port: int = Field(default=993, ge=1, le=65535)
    password: SecretStr = Field(default=SecretStr(""), description="Never shown again once saved.")


class Retry(Closed):
    attempts: int = Field(default=3, ge=0, le=10)
    gentle: bool = Field(default=True, description="Wait longer after each failure.")


class VaultSettings(Closed):
    server: Server = Field(default_factory=Server, title="Main server", description="Where it signs in first.")
    backup: Server | None = Field(default=None, title="Backup server")
    mirrors: list[Server] = Field(default_factory=list, max_length=5, description="Tried in this order.")
    tokens: list[SecretStr] = Field(default_factory=list, max_length=5, description="Access tokens, one a row.")
    labels: list[str] = Field(default_factory=list, max_length=10, description="Labels to file under.")
    retry: Retry = Field(default_factory=Retry)
    team_keys: dict[str, SecretStr] = Field(default_factory=dict, description="A key for each team.")
    limits: dict[str, int] = Field(default_factory=dict, description="Calls a day, by operation.")
    fallback: SecretStr | None = Field(default=None)


vault = Plugin(name="vault", version="0.1", settings=VaultSettings)


class Fingerprints(Closed):
    said: dict[str, str]


def _fingerprint(secret: SecretStr | None) -> str:
    value = secret.get_secret_value() if secret is not None else ""
    return hashlib.sha256(value.encode()).hexdigest()[:12] if value else "unset"


@vault.operation(
    name="fingerprints", summary="What it is set to, secrets as fingerprints.", input=Empty, output=Fingerprints
)
def fingerprints(service: Service, data: Empty) -> Fingerprints:
    settings = VaultSettings.model_validate(service.settings.model_dump())
    said = {"server": f"{settings.server.host}:{settings.server.port} {_fingerprint(settings.server.password)}"}
    if settings.backup is not None:
        said["backup"] = f"{settings.backup.host} {_fingerprint(settings.backup.password)}"
    for index, mirror in enumerate(settings.mirrors):
        said[f"mirrors.{index}"] = f"{mirror.host} {_fingerprint(mirror.password)}"
    for index, token in enumerate(settings.tokens):
        said[f"tokens.{index}"] = _fingerprint(token)
    for team, key in settings.team_keys.items():
        said[f"team_keys.{team}"] = _fingerprint(key)
    said["labels"] = ",".join(settings.labels)
    said["retry"] = f"{settings.retry.attempts} {'gentle' if settings.retry.gentle else 'hard'}"
    said["limits"] = ",".join(f"{k}={v}" for k, v in sorted(settings.limits.items()))
    said["fallback"] = _fingerprint(settings.fallback)
    return Fingerprints(said=said)
