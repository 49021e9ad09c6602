"""The plugin bridge: installed packages add operations named <plugin>.<name> (SPEC §17, docs/plugins.md).

A plugin names a `oaken_plugin.Plugin` in the entry point group `oaken.plugins`. Oaken never imports it: its
code runs only in processes of its own (oaken_plugin.host), started with an environment that holds no
database, Redis or secret settings and shut in before the plugin is imported. Oaken asks such a process what
the plugin offers (names, JSON schemas), checks every operation against the registry's rules (a plugin that
breaks one is refused and offers nothing; Oaken starts anyway), and registers a bridge operation for each:
it passes the same gate as every other operation (exposure starting off, roles, scopes, confirmation,
limits, audit), resolves the accounts and messages its input names in the caller's reach, reads the parts
the operation declared (`reads`) and hands them, with the tenant's settings for the plugin and the clock, to
one of the plugin's processes. A call that outlives PLUGIN_TIMEOUT_SECONDS kills that process (the next call
gets a new one); an exception is reported as its type only; a plugin whose health check fails, or whose
processes crash PLUGIN_CRASHES_MAX times within PLUGIN_HEALTH_SECONDS, offers nothing until a later check
passes.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, ClassVar, cast

from django.conf import settings
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.operations.registry import (
    _SCOPE_OF_CLASS,
    Ceiling,
    DefinitionError,
    OpClass,
    Operation,
    Preview,
    Registry,
    check_definition,
    registry,
)

log = logging.getLogger("oaken.plugins")
ENTRY_POINT_GROUP = "oaken.plugins"
# what a plugin's process keeps of Oaken's environment: nothing that names a server or holds a secret
_KEPT_ENVIRONMENT = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
# the JSON Schema "format" pydantic gives a SecretStr: such settings are never shown back
SECRET_FORMAT = "password"  # noqa: S105 - a JSON Schema format, not a password
MASK = "********"


class PluginFailure(Exception):
    """A plugin's process did not answer as it should (the reason is fixed text, never the plugin's)."""

    def __init__(self, reason: str, *, crashed: bool = False) -> None:
        super().__init__(reason)
        self.crashed = crashed


# ---------------------------------------------------------------- one process


def _environment(paths: Iterable[str]) -> dict[str, str]:
    env = {key: os.environ[key] for key in _KEPT_ENVIRONMENT if key in os.environ}
    env.update(HOME="/nonexistent", PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1", PYTHONIOENCODING="utf-8")
    extra = [p for p in paths if p]
    if extra:
        env["PYTHONPATH"] = os.pathsep.join(extra)
    return env


class _Process:
    """One process of a plugin, spoken to by JSON lines."""

    def __init__(self, target: str, paths: Iterable[str], timeout: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "oaken_plugin.host", target],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # what a plugin prints could quote mail
            env=_environment(paths),
            cwd="/",
            close_fds=True,
            start_new_session=True,
        )
        self._buffer = b""
        try:
            ready = self._read(timeout)
        except PluginFailure:
            self.kill()
            raise
        if not ready.get("ok"):
            self.kill()
            raise PluginFailure(f"the plugin failed to load ({_type_name(ready.get('error'))})")

    def ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise PluginFailure("the plugin's process ended", crashed=True) from None
        return self._read(timeout)

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        most = settings.OPERATIONS["PLUGIN_ANSWER_MAX_BYTES"]
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PluginFailure(f"the plugin did not answer within {timeout:g} s")
            readable, _, _ = select.select([fd], [], [], left)
            if not readable:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise PluginFailure("the plugin's process ended", crashed=True)
            self._buffer += chunk
            if len(self._buffer) > most:
                raise PluginFailure("the plugin's answer was too large")
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            answer = json.loads(line)
        except ValueError:
            raise PluginFailure("the plugin's answer was not JSON") from None
        if not isinstance(answer, dict):
            raise PluginFailure("the plugin's answer was not JSON")
        return answer

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def _type_name(value: object) -> str:
    text = str(value)
    return text if text.isidentifier() and len(text) <= 64 else "Exception"


# ---------------------------------------------------------------- a plugin: its processes and health


@dataclass
class Runtime:
    name: str
    target: str  # module:attribute
    paths: tuple[str, ...]
    version: str = ""
    description: dict[str, Any] = field(default_factory=dict)
    settings_schema: dict[str, Any] = field(default_factory=dict)
    _idle: list[_Process] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _healthy: bool = False
    _checked: float = float("-inf")
    _crashes: deque[float] = field(default_factory=deque)
    _owner: int = field(default_factory=os.getpid)

    def _take(self, timeout: float) -> _Process:
        if self._owner != os.getpid():
            # a forked worker (Celery's prefork pool): the processes it inherited are its parent's to talk to
            self._idle, self._lock, self._owner = [], threading.Lock(), os.getpid()
        with self._lock:
            while self._idle:
                process = self._idle.pop()
                if process.alive:
                    return process
                process.kill()
        return _Process(self.target, self.paths, timeout)

    def _give(self, process: _Process) -> None:
        with self._lock:
            if len(self._idle) < settings.OPERATIONS["PLUGIN_POOL_SIZE"] and process.alive:
                self._idle.append(process)
                return
        process.kill()

    def ask(self, request: dict[str, Any], timeout: float | None = None) -> Any:
        """The plugin's answer to one request, from one of its processes; PluginFailure, or OakenError for an
        exception the plugin raised (its type only)."""
        timeout = timeout or settings.OPERATIONS["PLUGIN_TIMEOUT_SECONDS"]
        process = self._take(timeout)
        try:
            answer = process.ask(request, timeout)
        except PluginFailure as failure:
            process.kill()  # cut at its timeout, or gone: the next call gets a new process
            if failure.crashed:
                self._crashed()
            raise
        self._give(process)
        if answer.get("ok") is not True:
            raise OakenError("PLUGIN_FAILED", f"the plugin failed ({_type_name(answer.get('error'))})")
        return answer.get("result")

    def _crashed(self) -> None:
        window = settings.OPERATIONS["PLUGIN_HEALTH_SECONDS"]
        now = time.monotonic()
        with self._lock:
            self._crashes.append(now)
            while self._crashes and self._crashes[0] < now - window:
                self._crashes.popleft()
            if len(self._crashes) >= settings.OPERATIONS["PLUGIN_CRASHES_MAX"]:
                self._healthy, self._checked = False, now
                log.warning("plugin %s is unhealthy: its processes keep ending", self.name)

    def healthy(self) -> bool:
        """Its health check's last answer, asked again once PLUGIN_HEALTH_SECONDS have passed."""
        if time.monotonic() - self._checked < settings.OPERATIONS["PLUGIN_HEALTH_SECONDS"]:
            return self._healthy
        try:
            healthy = self.ask({"kind": "health"}) is True
        except (PluginFailure, OakenError):
            healthy = False
        if not healthy and self._healthy:
            log.warning("plugin %s is unhealthy: its health check failed", self.name)
        with self._lock:
            self._healthy, self._checked = healthy, time.monotonic()
            if healthy:
                self._crashes.clear()
        return healthy

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for process in idle:
            process.kill()


_runtimes: dict[str, Runtime] = {}


def runtime(plugin: str) -> Runtime | None:
    return _runtimes.get(plugin)


def runtimes() -> list[Runtime]:
    return sorted(_runtimes.values(), key=lambda r: r.name)


def plugin_health(plugin: str) -> bool:
    """An unhealthy (or unknown) plugin offers nothing."""
    found = _runtimes.get(plugin)
    return found is not None and found.healthy()


# ---------------------------------------------------------------- models from a plugin's schemas


def untrusted(schema: Any) -> Any:
    """The schema with every string marked as mail-derived text (fenced as data at the MCP door): a plugin's
    output is built from mail, whatever its author declared."""
    if isinstance(schema, dict):
        marked = {key: untrusted(value) for key, value in schema.items()}
        if marked.get("type") == "string" or (isinstance(marked.get("type"), list) and "string" in marked["type"]):
            marked["x-untrusted"] = True
        return marked
    if isinstance(schema, list):
        return [untrusted(item) for item in schema]
    return schema


_PHRASES = {
    "type": "has the wrong type",
    "enum": "is not one of the allowed values",
    "const": "is not the allowed value",
    "minLength": "is too short",
    "maxLength": "is too long",
    "pattern": "does not have the expected form",
    "format": "does not have the expected form",
    "minimum": "is too small",
    "exclusiveMinimum": "is too small",
    "maximum": "is too large",
    "exclusiveMaximum": "is too large",
    "minItems": "has too few items",
    "maxItems": "has too many items",
    "uniqueItems": "has repeated items",
}


def first_error(validator: Draft202012Validator, value: Any) -> dict[str, Any] | None:
    """The most relevant error, as pydantic's line error: where, and a fixed phrase (never the value)."""
    error = best_match(validator.iter_errors(value))
    if error is None:
        return None
    loc = tuple(error.absolute_path)
    if error.validator == "required":
        missing = next((name for name in error.validator_value if name not in error.instance), None)
        return {"type": "missing", "loc": (*loc, missing) if missing else loc, "input": None}
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = next((name for name in error.instance if name not in allowed), None)
        return {"type": "extra_forbidden", "loc": (*loc, extra) if extra else loc, "input": None}
    phrase = _PHRASES.get(str(error.validator), "is not valid")
    return {"type": PydanticCustomError("plugin_schema", phrase), "loc": loc, "input": None}


class SchemaModel(BaseModel):
    """A model checked against a plugin's JSON schema (the plugin's own classes stay in its process). It
    declares no field and forbids any: the value, once the schema passed it, is kept whole and is what it
    dumps."""

    model_config = ConfigDict(extra="forbid")
    schema_of: ClassVar[dict[str, Any]] = {}
    validator_of: ClassVar[Draft202012Validator | None] = None
    _value: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _check(cls, value: Any, handler: Any) -> Any:
        if isinstance(value, cls):
            return value
        assert cls.validator_of is not None
        error = first_error(cls.validator_of, value)
        if error is not None:
            raise ValidationError.from_exception_data(cls.__name__, [error])  # type: ignore[list-item]
        made = handler({})
        made._value = copy.deepcopy(value)
        return made

    def model_dump(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return copy.deepcopy(self._value)

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return copy.deepcopy(cls.schema_of)

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        # what every schema of this model says (the OpenAPI document's among them): the plugin's
        return copy.deepcopy(cls.schema_of)


def inlined(schema: dict[str, Any], depth: int = 0) -> Any:
    """The schema with its local references ("#/$defs/...") replaced by what they name: a model of its own,
    wherever it is placed (an OpenAPI component, an MCP tool). A recursive schema is refused."""
    defs = schema.get("$defs", {})

    def walk(node: Any, depth: int) -> Any:
        if depth > 32:
            raise DefinitionError("a plugin's schema is recursive or too deep")
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                name = ref.removeprefix("#/$defs/")
                if name not in defs:
                    raise DefinitionError("a plugin's schema refers to what it does not define")
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return {**walk(defs[name], depth + 1), **walk(rest, depth + 1)}
            return {k: walk(v, depth + 1) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [walk(item, depth + 1) for item in node]
        return node

    result: dict[str, Any] = walk(schema, depth)
    return result


def schema_model(name: str, schema: dict[str, Any]) -> type[SchemaModel]:
    Draft202012Validator.check_schema(schema)
    model = cast(type[SchemaModel], type(name, (SchemaModel,), {"__module__": __name__}))
    model.schema_of = schema
    model.validator_of = Draft202012Validator(schema)
    return model


def _closed(schema: dict[str, Any]) -> bool:
    """An object that forbids fields it does not declare, and so does every object it defines."""
    objects = [schema, *schema.get("$defs", {}).values()]
    return all(o.get("type") != "object" or o.get("additionalProperties") is False for o in objects)


# ---------------------------------------------------------------- loading


def _describe(entry: EntryPoint) -> Runtime:
    # the folder its top-level module is found in, found without running it, for the process's path
    spec = importlib.util.find_spec(entry.value.split(":", 1)[0].split(".", 1)[0])
    if spec is None or spec.origin is None:
        raise DefinitionError(f"plugin {entry.name!r}: its module is not installed")
    origin = Path(spec.origin).resolve()
    base = origin.parent.parent if origin.name == "__init__.py" else origin.parent
    found = Runtime(name=entry.name, target=entry.value, paths=(str(base),))
    description = found.ask({"kind": "describe"})
    if not isinstance(description, dict) or description.get("name") != entry.name:
        raise DefinitionError(f"plugin {entry.name!r}: its Plugin has another name than its entry point")
    found.version = str(description.get("version", ""))[:40]
    found.settings_schema = description.get("settings_schema") or {}
    found.description = description
    return found


def _operations(found: Runtime) -> list[Operation]:
    operations = []
    for item in found.description.get("operations", []):
        name = f"{found.name}.{item.get('name')}"
        if not item.get("closed") or not _closed(item["input_schema"]) or not _closed(item["output_schema"]):
            raise DefinitionError(f"{name!r}: plugin inputs and outputs must forbid extra fields")
        op_class = {"read": OpClass.READ, "mutate": OpClass.MUTATE}.get(item.get("op_class"))
        if op_class is None:
            raise DefinitionError(f"{name!r}: a plugin operation is read or mutate, never send")
        if op_class == OpClass.MUTATE and not item.get("has_preview"):
            raise DefinitionError(f"{name!r}: a plugin mutation needs a preview")
        properties = item["input_schema"].get("properties", {})
        reads = tuple(str(t) for t in item.get("reads", []))
        if reads and "account_id" not in properties and "message_id" not in properties:
            raise DefinitionError(f"{name!r}: an operation that reads mail takes an account_id or a message_id")
        title = "".join(part.title() for part in name.replace(".", "_").split("_"))
        operations.append(
            Operation(
                name=name,
                summary=str(item.get("summary", ""))[:300],
                input_model=schema_model(f"{title}In", inlined(item["input_schema"])),
                output_model=schema_model(f"{title}Out", untrusted(inlined(item["output_schema"]))),
                op_class=op_class,
                ceiling=Ceiling.OFF,
                role="MEMBER",
                # the plugin works in `gather`, before the call's transaction opens (none stays open while a
                # plugin's process runs); the handler hands its answer to the gate, which audits it
                gather=_bridge(found, str(item["name"]), reads),
                handler=_answer,
                scope=_SCOPE_OF_CLASS[op_class],
                preview=_preview(found, str(item["name"])) if op_class == OpClass.MUTATE else None,
                targets=_targets,
                plugin=found.name,
            )
        )
    return operations


def load_plugins(entries: Iterable[EntryPoint] | None = None, *, into: Registry | None = None) -> list[str]:
    """Register every installed plugin's operations (or `entries`'). A plugin that cannot be asked what it
    offers, or offers an operation that breaks a registry rule, is refused with a log line and offers nothing;
    Oaken starts anyway."""
    target = into or registry
    loaded = []
    for entry in entries if entries is not None else entry_points(group=ENTRY_POINT_GROUP):
        try:
            found = _describe(entry)
            operations = _operations(found)
            scratch = Registry()  # every rule holds for all of them, or none is added
            for op in operations:
                check_definition(op, existing={o.name: o for o in target if o.name != op.name})
                scratch.add(op)
            for op in operations:
                if op.name in target:
                    raise DefinitionError(f"{op.name!r}: already registered")
        except DefinitionError as refused:
            log.error("plugin %s refused: %s", entry.name, refused)
            continue
        except (PluginFailure, OakenError) as failed:
            log.error("plugin %s refused: %s", entry.name, failed)
            continue
        except Exception as exc:  # a broken plugin must not take the service down; its type is enough
            log.error("plugin %s refused: %s", entry.name, type(exc).__name__)
            continue
        for op in operations:
            target.add(op)
        previous = _runtimes.pop(found.name, None)
        if previous is not None:
            previous.close()
        _runtimes[found.name] = found
        loaded.append(entry.name)
    return loaded


def unload_plugin(name: str, *, into: Registry | None = None) -> None:
    """Forget a plugin and stop its processes (tests that install throwaway plugins clean up after themselves)."""
    target = into or registry
    for op in [o for o in target if o.plugin == name]:
        target.remove(op.name)
    found = _runtimes.pop(name, None)
    if found is not None:
        found.close()


# ---------------------------------------------------------------- a call


@dataclass(frozen=True)
class MailReaders:
    """How a call finds what its input names (in the caller's reach) and the parts it declared it reads. The
    operations' definitions provide them (apps.operations.defs.plugins): the bridge itself knows no mail, as
    the gate, which asks it for a plugin's health, must not."""

    targets: Callable[[Any, BaseModel], Any]
    parts: Callable[[Any, BaseModel, tuple[str, ...]], list[dict[str, Any]]]


_readers: list[MailReaders] = []


def provide_mail_readers(readers: MailReaders) -> None:
    _readers[:] = [readers]


def _targets(ctx: Any, data: BaseModel) -> Any:
    return _readers[0].targets(ctx, data)


def settings_of(tenant: Any, plugin: str) -> dict[str, Any]:
    from apps.operations.models import PluginSettings

    stored = PluginSettings.objects.for_tenant(tenant).filter(plugin=plugin).values_list("values", flat=True).first()
    return dict(stored or {})


def _unavailable() -> OakenError:
    return OakenError.not_available()


def _bridge(found: Runtime, operation: str, reads: tuple[str, ...]) -> Any:
    def handler(ctx: Any, data: BaseModel) -> Any:
        if not found.healthy():
            raise _unavailable()
        request = {
            "kind": "call",
            "operation": operation,
            "input": data.model_dump(mode="json"),
            "settings": settings_of(ctx.tenant, found.name),
            "now": ctx.now.isoformat(),
            "parts": _readers[0].parts(ctx, data, reads),
        }
        try:
            return found.ask(request)
        except PluginFailure as failure:
            raise OakenError("PLUGIN_FAILED", str(failure)) from None

    handler.__doc__ = f"Runs {found.name}.{operation} in the plugin's own process."
    return handler


def _answer(ctx: Any, data: BaseModel) -> Any:
    """What the plugin answered (ctx.gathered), for the gate to check against the output schema."""
    return ctx.gathered


def _preview(found: Runtime, operation: str) -> Any:
    def preview(ctx: Any, data: BaseModel) -> Preview:
        try:
            text = found.ask({"kind": "preview", "operation": operation, "input": data.model_dump(mode="json")})
        except PluginFailure as failure:
            raise OakenError("PLUGIN_FAILED", str(failure)) from None
        return Preview((Change(f"{found.name}.{operation}", None, {"plan": str(text)[:2000]}),))

    return preview
