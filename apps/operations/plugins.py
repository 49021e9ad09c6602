"""The plugin bridge: installed packages add operations named <plugin>.<name> (SPEC §17, docs/plugins.md).

A plugin names a `oaken_plugin.Plugin` in the entry point group `oaken.plugins` of a package installed in the
plugin environment (a Python environment of its own, OAKEN_PLUGIN_ENV, never Oaken's: its code, a `.pth` file
included, runs only in the sandbox) or in a folder of OAKEN_PLUGIN_PATH. Oaken reads the entry points from the
packages' metadata and never imports a plugin: its code runs only in processes of its own, each in an
operating-system sandbox (apps.operations.sandbox) and serving one tenant (apps.operations.plugin_processes).
Where the sandbox cannot be made, no plugin is loaded (OAKEN_PLUGIN_SANDBOX=none, for development only, runs
them without one). Two packages claiming one name are both refused.

At start, a process of each plugin is asked what it offers (names, JSON schemas), within PLUGIN_START_SECONDS;
every operation is checked against the registry's rules (a plugin that breaks one is refused and offers nothing;
Oaken starts anyway), and the words a plugin wrote (summaries, titles, descriptions) are made plain and short
before an agent reads them. Each operation is registered as a bridge operation: it passes the same gate as every
other (exposure starting off, roles, scopes, confirmation for every mutation, limits, audit), resolves the
accounts and messages its input names in the caller's reach, reads the parts the operation declared (`reads`)
and hands them, with the tenant's settings for the plugin and the clock, to one of the plugin's processes for
that tenant. A call past PLUGIN_TIMEOUT_SECONDS or PLUGIN_CPU_SECONDS ends its process; an exception is
reported as the name of a built-in exception only; more than PLUGIN_CALLS_IN_FLIGHT calls of one plugin at
once are refused, not queued. A plugin whose health check fails, or whose processes crash PLUGIN_CRASHES_MAX
times within PLUGIN_HEALTH_SECONDS, offers nothing until a later check passes; checks run in the background.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import distributions, entry_points
from pathlib import Path
from typing import Any, ClassVar, cast

from django.conf import settings
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, best_match
from jsonschema.exceptions import ValidationError as JsonSchemaError
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator
from pydantic_core import PydanticCustomError, SchemaValidator, core_schema
from pydantic_core import SchemaError as PydanticSchemaError

from apps.core.bounds import bounds
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.operations import sandbox
from apps.operations.plugin_processes import PluginFailure, PluginProcess, exception_name, pools
from apps.operations.registry import (
    _SCOPE_OF_CLASS,
    ALWAYS,
    NEVER,
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
# the JSON Schema "format" pydantic gives a SecretStr: such settings are never shown back
SECRET_FORMAT = "password"  # noqa: S105 - a JSON Schema format, not a password
MASK = "********"
_PLUGIN_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_TARGET = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
_PACKAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_PROPERTY_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
SUMMARY_MAX_CHARS = 200
WORDS_MAX_CHARS = 300
# keywords whose value maps names (a field's, a definition's) to schemas
_NAMED_SCHEMAS = ("properties", "$defs", "definitions")
# what a plugin's schema may say (pydantic's models say no more); anything else is left out of it
_KEYWORDS = frozenset(
    {
        *("type", "properties", "required", "additionalProperties", "items", "prefixItems", "anyOf", "oneOf"),
        *("allOf", "enum", "const", "default", "title", "description", "format", "pattern", "minLength"),
        *("maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems"),
        *("maxItems", "uniqueItems", "minProperties", "maxProperties", "$ref", "$defs", "definitions"),
        *("writeOnly", "readOnly", "deprecated", "contentMediaType", "contentEncoding"),
    }
)
# a plugin's schema, its references resolved, holds at most this many nodes (a few kB of references can resolve to
# millions: every Oaken process checks them at start)
SCHEMA_NODES_MAX = 5000
PATTERN_MAX_CHARS = 300


# ---------------------------------------------------------------- the words a plugin wrote


def plain(text: object, most: int) -> str:
    """Text a plugin wrote, as an agent or a person may read it: printable characters on one line, short."""
    words = " ".join("".join(c if c.isprintable() else " " for c in str(text)).split())
    return words if len(words) <= most else words[: most - 1] + "…"


def reduced(schema: Any) -> Any:
    """A plugin's JSON schema as an agent and a person may read it: only the keywords of JSON Schema that Oaken
    knows (a keyword of the plugin's own is left out, and so are examples and comments), and every string in it,
    a title, a description, a default, an enum value, made plain and short; a pattern is kept as it is (checked by
    schema_model). An enum value cut so can no longer be matched: that operation then fails, plainly."""
    if isinstance(schema, dict):
        kept: dict[str, Any] = {}
        for key, value in schema.items():
            if key in _NAMED_SCHEMAS and isinstance(value, dict):
                kept[key] = {name: reduced(sub) for name, sub in value.items()}  # names, not keywords
            elif key == "pattern" and isinstance(value, str):
                kept[key] = value
            elif key in _KEYWORDS:
                kept[key] = reduced(value)
        return kept
    if isinstance(schema, list):
        return [reduced(item) for item in schema]
    if isinstance(schema, str):
        return plain(schema, WORDS_MAX_CHARS)
    return schema


def _property_names(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                yield from (str(name) for name in value)
            yield from _property_names(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _property_names(item)


def _package(name: object) -> str:
    text = str(name)
    return text if _PACKAGE_NAME.match(text) else "a package with an unreadable name"


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
    nodes = 0

    def walk(node: Any, depth: int) -> Any:
        nonlocal nodes
        nodes += 1
        if nodes > SCHEMA_NODES_MAX:
            raise DefinitionError(f"a plugin's schema holds more than {SCHEMA_NODES_MAX} parts once resolved")
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


@lru_cache(maxsize=1024)
def _pattern(pattern: str) -> SchemaValidator:
    """A pattern compiled for a regular-expression engine that runs in linear time (pydantic-core's, Rust's):
    Python's `re` takes time exponential in the text for patterns such as ^(a+)+$, in Oaken's own process."""
    return SchemaValidator(core_schema.str_schema(pattern=pattern), core_schema.CoreConfig(regex_engine="rust-regex"))


def _matches(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[JsonSchemaError]:
    if isinstance(instance, str) and not _pattern(pattern).isinstance_python(instance):
        yield JsonSchemaError("does not match its pattern")


# the validator of every schema a plugin gave (its inputs, outputs and settings): JSON Schema 2020-12, a pattern
# matched in linear time
PluginValidator = validators.extend(Draft202012Validator, {"pattern": _matches})


def validator(schema: dict[str, Any]) -> Draft202012Validator:
    """A checked validator of a plugin's schema; DefinitionError when its patterns are too long or need what a
    linear-time engine lacks (back-references, look-around)."""
    try:
        PluginValidator.check_schema(schema)
    except SchemaError:
        raise DefinitionError("its schema is not a JSON schema") from None
    for pattern in _patterns(schema):
        if len(pattern) > PATTERN_MAX_CHARS:
            raise DefinitionError(f"a pattern of its schema is longer than {PATTERN_MAX_CHARS} characters")
        try:
            _pattern(pattern)
        except PydanticSchemaError:
            raise DefinitionError("a pattern of its schema needs back-references or look-around") from None
    return cast(Draft202012Validator, PluginValidator(schema))


def _patterns(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            elif key in _NAMED_SCHEMAS and isinstance(value, dict):
                for sub in value.values():
                    yield from _patterns(sub)
            else:
                yield from _patterns(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _patterns(item)


def schema_model(name: str, schema: dict[str, Any]) -> type[SchemaModel]:
    checked = validator(schema)
    model = cast(type[SchemaModel], type(name, (SchemaModel,), {"__module__": __name__}))
    model.schema_of = schema
    model.validator_of = checked
    return model


def _closed(schema: dict[str, Any]) -> bool:
    """An object that forbids fields it does not declare, and so does every object it defines."""
    objects = [schema, *schema.get("$defs", {}).values()]
    return all(o.get("type") != "object" or o.get("additionalProperties") is False for o in objects)


# ---------------------------------------------------------------- where plugins are, and whether they can run


@dataclass(frozen=True)
class Found:
    """An entry point of the group, read from a package's metadata (nothing of the package has run)."""

    name: str
    target: str  # module:attribute
    package: str
    folder: Path  # the site folder its package was found in


@dataclass
class Status:
    """What the console and list_plugins tell an admin about plugins beyond the loaded ones."""

    sandbox: str = sandbox.BWRAP
    problem: str = ""  # why no plugin could be loaded (no environment, no sandbox)
    refused: dict[str, str] = field(default_factory=dict)  # plugin name -> why it was refused


status = Status()


def environment(folders: Sequence[Path] | None = None) -> sandbox.Environment:
    extra = settings.PLUGIN_PATH if folders is None else folders
    return sandbox.Environment.at(Path(settings.PLUGIN_ENV), extra, private=[settings.DATA_DIR])


def discover(folders: Iterable[Path]) -> tuple[list[Found], dict[str, str]]:
    """The plugins the packages in these folders declare, and the names refused: a name claimed by two packages
    refuses both (neither may take the other's place, nor the exposure an admin gave the name)."""
    claims: dict[str, list[Found]] = {}
    refused: dict[str, str] = {}
    for folder in folders:
        for dist in distributions(path=[str(folder)]):
            package = _package(dist.metadata["Name"])
            for entry in dist.entry_points.select(group=ENTRY_POINT_GROUP):
                if not _PLUGIN_NAME.match(entry.name):
                    refused[plain(entry.name, 40)] = f"{package} declares a plugin whose name is not snake_case"
                    continue
                found = Found(entry.name, entry.value.strip(), package, Path(folder))
                if found not in claims.setdefault(entry.name, []):
                    claims[entry.name].append(found)
    plugins = []
    for name, claimed in sorted(claims.items()):
        if len(claimed) > 1:
            packages = ", ".join(sorted({f.package for f in claimed}))
            refused[name] = f"{len(claimed)} packages claim the name {name} ({packages}): neither is loaded"
        elif not _TARGET.match(claimed[0].target):
            refused[name] = "its entry point does not name module:attribute"
        else:
            plugins.append(claimed[0])
    return plugins, refused


def _in_oakens_environment(loaded: set[str]) -> dict[str, str]:
    """Plugins installed in Oaken's own environment (where an older Oaken had them): never loaded from there, and
    said so, since their code (a .pth file) may run in Oaken's processes."""
    here = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if _PLUGIN_NAME.match(entry.name) and entry.name not in loaded:
            here[entry.name] = (
                "it is installed in Oaken's own environment, where no plugin is loaded: install it in the plugin "
                "environment (docs/plugins.md) and uninstall it from Oaken's"
            )
    return here


def _limits() -> sandbox.Limits:
    return sandbox.Limits(
        memory_mb=bounds.PLUGIN_MEMORY_MAX_MB,
        tasks=bounds.PLUGIN_THREADS_MAX,
        files=bounds.PLUGIN_FILES_MAX,
        file_mb=bounds.PLUGIN_FILE_MAX_MB,
        cpu_seconds=_life_cpu_seconds(),
    )


def _life_cpu_seconds() -> int:
    # a process lives for many calls: the kernel ends it past this; the pool retires it at half, between calls
    return 40 * bounds.PLUGIN_CPU_SECONDS


# ---------------------------------------------------------------- a plugin: its processes and health


@dataclass
class Runtime:
    name: str
    target: str  # module:attribute
    env: sandbox.Environment
    folder: Path | None = None  # its package's folder, when outside the environment
    package: str = ""
    version: str = ""
    description: dict[str, Any] = field(default_factory=dict)
    settings_schema: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _healthy: bool = False
    _checked: float = float("-inf")
    _checking: bool = False
    # when processes ended badly, by tenant ("" for the plugin's own): a tenant whose calls keep ending processes
    # (an input the plugin cannot take) loses the plugin for a while, other tenants keep it
    _crashes: dict[str, deque[float]] = field(default_factory=dict)
    _in_flight: int = 0

    def _start(self, key: tuple[str, str]) -> PluginProcess:
        """A new process of the plugin, in its sandbox, once it has imported the plugin."""
        timeout = bounds.PLUGIN_START_SECONDS
        args = ["-m", "oaken_plugin.host", self.target]
        places = []
        if self.folder is not None:
            args += ["--site", str(self.folder)]
            places.append(self.folder)
        launched = sandbox.spawn(settings.PLUGIN_SANDBOX, self.env, places, _limits(), args, timeout)
        return PluginProcess(key, launched, timeout)

    def ask(
        self,
        request: dict[str, Any],
        *,
        tenant: str,
        timeout: float | None = None,
        check: Callable[[Any], object] | None = None,
    ) -> Any:
        """The plugin's answer to one request, from one of its processes serving `tenant` ("" for the plugin's
        own work); PluginFailure, or OakenError for an exception the plugin raised (a built-in name only)."""
        timeout = timeout or bounds.PLUGIN_TIMEOUT_SECONDS
        key = (self.name, tenant)
        try:
            process = pools.take(key, lambda: self._start(key))
        except (PluginFailure, sandbox.SandboxUnavailable, OSError) as failure:
            self._crashed(tenant)
            reason = "the plugin's process could not be started" if isinstance(failure, OSError) else str(failure)
            raise PluginFailure(reason) from None
        try:
            answer = process.ask(request, timeout, bounds.PLUGIN_CPU_SECONDS)
        except PluginFailure as failure:
            pools.discard(process)  # cut, gone or misbehaving: the next call gets a new process
            if failure.crashed:
                self._crashed(tenant)
            raise
        if answer.get("ok") is not True:
            pools.discard(process)  # a process that raised may hold a broken state (a MemoryError, say)
            raise OakenError("PLUGIN_FAILED", f"the plugin failed ({exception_name(answer.get('error'))})")
        if check is not None:
            try:
                check(answer.get("result"))
            except (ValidationError, TypeError, ValueError):
                pools.discard(process)
                raise PluginFailure("the plugin's answer did not match its output schema") from None
        pools.give(process, cpu_seconds_life=_life_cpu_seconds())
        return answer.get("result")

    @contextlib.contextmanager
    def calling(self) -> Iterator[None]:
        """One of at most PLUGIN_CALLS_IN_FLIGHT calls of this plugin in this Oaken process; one more is refused
        at once (a slow plugin must not hold every web thread)."""
        with self._lock:
            if self._in_flight >= bounds.PLUGIN_CALLS_IN_FLIGHT:
                raise OakenError(
                    "SERVICE_UNAVAILABLE", f"the plugin {self.name} is busy right now; try again shortly", retry_after=1
                )
            self._in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    def _crashed(self, tenant: str) -> None:
        window = bounds.PLUGIN_HEALTH_SECONDS
        now = time.monotonic()
        with self._lock:
            crashes = self._crashes.setdefault(tenant, deque())
            crashes.append(now)
            while crashes and crashes[0] < now - window:
                crashes.popleft()
            if len(crashes) >= bounds.PLUGIN_CRASHES_MAX:
                if tenant:
                    log.warning("plugin %s is unhealthy for one tenant: its processes keep ending", self.name)
                else:
                    self._healthy, self._checked = False, now
                    log.warning("plugin %s is unhealthy: its processes keep ending", self.name)

    def crashing(self, tenant: str) -> bool:
        """Whether this tenant's processes of the plugin ended badly PLUGIN_CRASHES_MAX times lately."""
        window = bounds.PLUGIN_HEALTH_SECONDS
        with self._lock:
            crashes = self._crashes.get(tenant, ())
            recent = [t for t in crashes if t >= time.monotonic() - window]
            return len(recent) >= bounds.PLUGIN_CRASHES_MAX

    def healthy(self) -> bool:
        """Its health check's last answer, never waited for: once PLUGIN_HEALTH_SECONDS have passed, the next
        check starts in the background."""
        with self._lock:
            stale = time.monotonic() - self._checked >= bounds.PLUGIN_HEALTH_SECONDS
            if stale and not self._checking:
                self._checking = True
                threading.Thread(target=self.check_health, name=f"oaken-plugin-health-{self.name}", daemon=True).start()
            return self._healthy

    def check_health(self, timeout: float | None = None) -> bool:
        """Ask the plugin's own process (no tenant's) whether it can work, within the call timeout (or `timeout`)."""
        try:
            healthy = self.ask({"kind": "health"}, tenant="", timeout=timeout) is True
        except Exception:  # whatever went wrong (a process that could not start, say), it cannot work now
            healthy = False
        with self._lock:
            if not healthy and self._healthy:
                log.warning("plugin %s is unhealthy: its health check failed", self.name)
            self._healthy, self._checked, self._checking = healthy, time.monotonic(), False
            if healthy:
                self._crashes.pop("", None)
        return healthy

    def close(self) -> None:
        pools.close(self.name)


_runtimes: dict[str, Runtime] = {}


def runtime(plugin: str) -> Runtime | None:
    return _runtimes.get(plugin)


def runtimes() -> list[Runtime]:
    return sorted(_runtimes.values(), key=lambda r: r.name)


def plugin_health(plugin: str, tenant: Any = None) -> bool:
    """An unhealthy (or unknown) plugin offers nothing: to anyone, or to a tenant whose calls keep ending its
    processes."""
    found = _runtimes.get(plugin)
    if found is None or not found.healthy():
        return False
    return tenant is None or not found.crashing(str(tenant.pk))


# ---------------------------------------------------------------- loading


class _OperationSaid(BaseModel):
    """What a plugin's process says of one operation (checked here: the process is not trusted)."""

    model_config = ConfigDict(extra="ignore")
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,59}$")
    summary: str = Field(max_length=10_000)
    op_class: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    has_preview: bool
    reads: list[str] = Field(default_factory=list, max_length=20)


class _PluginSaid(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    version: str = Field(max_length=200)
    settings_schema: dict[str, Any]
    operations: list[_OperationSaid] = Field(max_length=200)


def _describe(found: Found, env: sandbox.Environment, site_packages: Path) -> Runtime:
    folder = None if found.folder == site_packages else found.folder
    began = time.monotonic()
    made = Runtime(name=found.name, target=found.target, env=env, folder=folder, package=found.package)
    try:
        said = _PluginSaid.model_validate(
            made.ask({"kind": "describe"}, tenant="", timeout=bounds.PLUGIN_START_SECONDS)
        )
    except ValidationError:
        raise DefinitionError("it described itself wrongly") from None
    if said.name != found.name:
        raise DefinitionError("its Plugin has another name than its entry point")
    for schema in (said.settings_schema, *(s for op in said.operations for s in (op.input_schema, op.output_schema))):
        if any(not _PROPERTY_NAME.match(name) for name in _property_names(schema)):
            raise DefinitionError("a field of its schemas is not named by an identifier")
    made.version = plain(said.version, 40)
    made.settings_schema = reduced(said.settings_schema)
    validator(made.settings_schema)
    made.description = said.model_dump()
    # the first health check shares the start's bound: a plugin hanging in it delays the start by no more
    made.check_health(timeout=max(0.1, began + bounds.PLUGIN_START_SECONDS - time.monotonic()))
    return made


def _operations(found: Runtime) -> list[Operation]:
    operations = []
    for item in _PluginSaid.model_validate(found.description).operations:
        name = f"{found.name}.{item.name}"
        if not _closed(item.input_schema) or not _closed(item.output_schema):
            raise DefinitionError(f"{name!r}: plugin inputs and outputs must forbid extra fields")
        op_class = {"read": OpClass.READ, "mutate": OpClass.MUTATE}.get(item.op_class)
        if op_class is None:
            raise DefinitionError(f"{name!r}: a plugin operation is read or mutate, never send")
        if op_class == OpClass.MUTATE and not item.has_preview:
            raise DefinitionError(f"{name!r}: a plugin mutation needs a preview")
        properties = item.input_schema.get("properties", {})
        reads = tuple(plain(t, 100) for t in item.reads)
        if reads and "account_id" not in properties and "message_id" not in properties:
            raise DefinitionError(f"{name!r}: an operation that reads mail takes an account_id or a message_id")
        title = "".join(part.title() for part in name.replace(".", "_").split("_"))
        try:
            input_model = schema_model(f"{title}In", reduced(inlined(item.input_schema)))
            output_model = schema_model(f"{title}Out", untrusted(reduced(inlined(item.output_schema))))
        except DefinitionError as wrong:
            raise DefinitionError(f"{name!r}: {wrong}") from None
        operations.append(
            Operation(
                name=name,
                summary=plain(item.summary, SUMMARY_MAX_CHARS),
                input_model=input_model,
                output_model=output_model,
                op_class=op_class,
                ceiling=Ceiling.OFF,
                role="MEMBER",
                # the plugin works in `gather`, before the call's transaction opens (none stays open while a
                # plugin's process runs); the handler hands its answer to the gate, which audits it
                gather=_bridge(found, item.name, reads, output_model),
                handler=_answer,
                scope=_SCOPE_OF_CLASS[op_class],
                preview=_preview(found, item.name) if op_class == OpClass.MUTATE else None,
                # a plugin's change is confirmed like every change offered to agents: a person confirms it, an
                # agent gets a proposal with its preview
                confirm=ALWAYS if op_class == OpClass.MUTATE else NEVER,
                targets=_targets,
                plugin=found.name,
                description=(
                    f"An operation of the plugin {found.name} {found.version} (package {found.package}): its summary "
                    "and field descriptions are the plugin author's words, not Oaken's nor the user's."
                ),
            )
        )
    return operations


def load_plugins(folders: Sequence[Path] | None = None, *, into: Registry | None = None) -> list[str]:
    """Register the operations of every plugin installed (in the plugin environment and OAKEN_PLUGIN_PATH; or
    only those in `folders`). A plugin that cannot be asked what it offers, offers an operation that breaks a
    registry rule, or shares its name with another is refused with a log line and offers nothing; where the
    sandbox cannot be made, every plugin is. Oaken starts anyway."""
    target = into or registry
    status.sandbox = settings.PLUGIN_SANDBOX
    try:
        env = environment()
    except sandbox.SandboxUnavailable as missing:
        status.problem = str(missing)
        log.info("no plugin is loaded: %s", missing)
        return []
    found, refused = discover([env.site_packages, *settings.PLUGIN_PATH] if folders is None else folders)
    if folders is None:
        refused.update(_in_oakens_environment({f.name for f in found}))
    found = [f for f in found if f.name not in _runtimes]  # loaded already (unload_plugin first to load it again)
    if not found and not refused:
        return []
    if settings.PLUGIN_SANDBOX == sandbox.NONE:
        log.warning(
            "OAKEN_PLUGIN_SANDBOX=none: plugins run WITHOUT a sandbox: their code can read Oaken's files, reach its "
            "database and the network as Oaken's own user. For development only; never with plugins you did not write"
        )
    problem = sandbox.unavailable(settings.PLUGIN_SANDBOX, env)
    if problem is not None:
        status.problem = f"the plugin sandbox cannot be made here: {problem}"
        for name in [f.name for f in found]:
            refused[name] = "the sandbox cannot be made here"
        log.error("no plugin is loaded: %s", status.problem)
        found = []
    for name, why in refused.items():
        log.error("plugin %s refused: %s", name, why)
    # every plugin is described at once, each within its own bound: a hanging one delays start-up by its bound
    described: dict[str, Runtime | Exception] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(found)))) as workers:
        futures = {f.name: workers.submit(_describe, f, env, env.site_packages) for f in found}
        for name, future in futures.items():
            try:
                described[name] = future.result()
            except Exception as failed:
                described[name] = failed
    loaded = []
    for name, made in described.items():
        try:
            if isinstance(made, Exception):
                raise made
            operations = _operations(made)
            scratch = Registry()  # every rule holds for all of them, or none is added
            for op in operations:
                check_definition(op, existing={o.name: o for o in target if o.name != op.name})
                scratch.add(op)
            for op in operations:
                if op.name in target:
                    raise DefinitionError(f"{op.name!r}: already registered")
        except (DefinitionError, PluginFailure, OakenError) as failed:
            refused[name] = str(failed)
        except Exception as failed:  # a broken plugin must not take the service down; its type is enough
            refused[name] = type(failed).__name__
        else:
            for op in operations:
                target.add(op)
            previous = _runtimes.pop(name, None)
            if previous is not None:
                previous.close()
            _runtimes[name] = made
            loaded.append(name)
            refused.pop(name, None)
            continue
        log.error("plugin %s refused: %s", name, refused[name])
        if isinstance(made, Runtime):
            made.close()
    status.refused.update(refused)
    for name in loaded:
        status.refused.pop(name, None)
    return sorted(loaded)


def unload_plugin(name: str, *, into: Registry | None = None) -> None:
    """Forget a plugin and stop its processes (tests that install throwaway plugins clean up after themselves)."""
    target = into or registry
    for op in [o for o in target if o.plugin == name]:
        target.remove(op.name)
    found = _runtimes.pop(name, None)
    if found is not None:
        found.close()
    status.refused.pop(name, None)


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


def _tenant(ctx: Any) -> str:
    return str(ctx.tenant.pk)


def _bridge(found: Runtime, operation: str, reads: tuple[str, ...], output: type[SchemaModel]) -> Any:
    def handler(ctx: Any, data: BaseModel) -> Any:
        if not found.healthy() or found.crashing(_tenant(ctx)):
            raise OakenError.not_available()
        request = {
            "kind": "call",
            "operation": operation,
            "input": data.model_dump(mode="json"),
            "settings": settings_of(ctx.tenant, found.name),
            "now": ctx.now.isoformat(),
            "parts": _readers[0].parts(ctx, data, reads),
        }
        with found.calling():
            try:
                return found.ask(request, tenant=_tenant(ctx), check=output.model_validate)
            except PluginFailure as failure:
                raise OakenError("PLUGIN_FAILED", str(failure)) from None

    handler.__doc__ = f"Runs {found.name}.{operation} in a process of the plugin's own, in its sandbox."
    return handler


def _answer(ctx: Any, data: BaseModel) -> Any:
    """What the plugin answered (ctx.gathered), for the gate to check against the output schema."""
    return ctx.gathered


def _preview(found: Runtime, operation: str) -> Any:
    def preview(ctx: Any, data: BaseModel) -> Preview:
        request = {"kind": "preview", "operation": operation, "input": data.model_dump(mode="json")}
        with found.calling():
            try:
                text = found.ask(request, tenant=_tenant(ctx))
            except PluginFailure as failure:
                raise OakenError("PLUGIN_FAILED", str(failure)) from None
        return Preview((Change(f"{found.name}.{operation}", None, {"plan": plain(text, 2000)}),))

    return preview
