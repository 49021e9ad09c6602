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
before an agent reads them (apps.operations.plugin_schema). Each operation is registered as a bridge operation:
it passes the same gate as every other (exposure starting off, roles, scopes, confirmation for every mutation,
limits, audit), resolves the accounts and messages its input names in the caller's reach, reads the parts the
operation declared (`reads`) and hands them, with the tenant's settings for the plugin and the clock, to one of
the plugin's processes for that tenant (apps.operations.plugin_runtime: its bounds, its health).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib.metadata import distributions, entry_points
from pathlib import Path
from typing import Any

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from apps.core.bounds import bounds
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.operations import plugin_runtime, sandbox
from apps.operations.plugin_processes import PluginFailure
from apps.operations.plugin_runtime import Runtime
from apps.operations.plugin_schema import (
    PROPERTY_NAME,
    SUMMARY_MAX_CHARS,
    SchemaModel,
    closed,
    inlined,
    plain,
    property_names,
    reduced,
    schema_model,
    untrusted,
    validator,
)
from apps.operations.plugin_state import settings_of
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
_PLUGIN_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_TARGET = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")
_PACKAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def _package(name: object) -> str:
    """A package's name as its metadata says it, if it reads as a name (it is shown to an admin)."""
    text = str(name)
    return text if _PACKAGE_NAME.match(text) else "a package with an unreadable name"


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
        if any(not PROPERTY_NAME.match(name) for name in property_names(schema)):
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
        if not closed(item.input_schema) or not closed(item.output_schema):
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
    # one loaded already is left as it is (unload_plugin first to load it again)
    found = [f for f in found if plugin_runtime.runtime(f.name) is None]
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
            plugin_runtime.keep(made)
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
    plugin_runtime.forget(name)
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
