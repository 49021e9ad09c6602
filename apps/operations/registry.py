"""The operation registry: every capability is defined here once, and checked when it is defined.

An operation is data: a frozen `Operation` with typed input and output models, a class, a
ceiling for agents, the lowest role, a preview and confirmation rule for mutations, and a
handler. The REST API, the OpenAPI document, the MCP tool list, the CLI and the console are
all generated from this registry. Definitions that break a rule of SPEC §3 raise at import.

Targets. What an input names (ids, accounts, a draft, an e-mail's decoded content) is resolved
once, by the operation's `targets(ctx, data)`: it looks each one up within the caller's reach
and raises NOT_FOUND, OUT_OF_SCOPE (or the input's own refusal) exactly where the gate checks
data scope (step 4, before class, confirmation and limits). The gate puts what it returns on
`ctx.targets`, where the preview and the handler read it; neither looks it up again. For a
mutation or a send the gate resolves the targets again inside the handler's transaction, with
`ctx.in_transaction` set (a resolver locks there the rows the change moves): a change works
from what it reads in its own transaction, never from what the checks read before it began.
A read is answered from the one resolution. An operation that commits in batches has no
transaction of its own: the gate resolves its targets again just before its handler starts.
An operation whose input names nothing to look up declares no targets (`ctx.targets` is None).
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from apps.audit.events import INTERNAL_EVENTS
from apps.core.bounds import Bounds
from apps.core.changes import Change
from apps.core.kinds import Scope

READ_STATE_SERVICE = "apps.mail.readstate"
_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)?$")


class OpClass(StrEnum):
    READ = "read"
    MUTATE = "mutate"
    SEND = "send"


class Ceiling(StrEnum):
    """How far an operation may ever be offered to agents."""

    NEVER = "never"
    OFF = "off"
    ON = "on"


class Callers(StrEnum):
    """Which principals may call an operation at all (agents are further held to the ceiling)."""

    ANY = "any"  # persons, agents within the ceiling, and the system
    PERSONS = "persons"  # people only (ui, cli): never an agent, never a task
    INTERNAL = "internal"  # the system only: Celery tasks and schedules on the internal door
    # what a person set up that acts by itself (Caller.standing: an automatic reply), on the internal door, as that
    # person: never a person at a door, never an agent, never a task on its own
    STANDING = "standing"
    # the server's own side: persons at its command line (cli door) and the system (internal door), never a
    # door over the network, for inputs that name the server's own files
    SERVER = "server"
    # a person following an invitation link in the console (ui door), a member of its tenant or not yet: the one
    # operation that needs no role there, accepting the invitation
    INVITEES = "invitees"


_SCOPE_OF_CLASS = {OpClass.READ: Scope.READ, OpClass.MUTATE: Scope.WRITE, OpClass.SEND: Scope.SEND}


class DefinitionError(Exception):
    """An operation definition breaks a registry rule (SPEC §3); the process must not start."""


In = TypeVar("In", bound=BaseModel)


@dataclass(frozen=True)
class Preview:
    """What a mutation would do, computed without doing it."""

    changes: tuple[Change, ...]
    summary: str = ""
    # for a proposal an agent shows a person: what that person must be shown, in Oaken's own words (never
    # mail text, so the MCP door leaves it unfenced)
    shown: str = ""
    # what a person's confirmation dialog says, in words (apps.operations.words): its title as a question ("Delete
    # this key?"), the confirm button's verb, and a short list of what changes; never a field's name
    title: str = ""
    verb: str = ""
    lines: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        return len(self.changes)


@dataclass(frozen=True)
class ConfirmRule(Generic[In]):
    """When a mutation needs confirmation: always, never, or when its size passes a threshold."""

    kind: str  # "always" | "never" | "above" | "when"
    threshold_setting: str = ""
    size: Callable[[Any], int] | None = None
    predicate: Callable[[Any], bool] | None = None

    def needs_confirmation(self, data: Any, bounds: Bounds) -> bool:
        if self.kind == "always":
            return True
        if self.kind == "never":
            return False
        if self.kind == "when":
            assert self.predicate is not None
            return self.predicate(data)
        assert self.size is not None
        return self.size(data) > bounds[self.threshold_setting]


ALWAYS: ConfirmRule[Any] = ConfirmRule("always")
NEVER: ConfirmRule[Any] = ConfirmRule("never")


def above(threshold_setting: str, size: Callable[[Any], int]) -> ConfirmRule[Any]:
    """Small, reversible changes pass unconfirmed; above the threshold (a setting) they need confirmation."""
    return ConfirmRule("above", threshold_setting=threshold_setting, size=size)


def when(predicate: Callable[[Any], bool]) -> ConfirmRule[Any]:
    """Confirmation needed when the input asks for something (e.g. summarize with mark_read)."""
    return ConfirmRule("when", predicate=predicate)


@dataclass(frozen=True)
class Bound:
    """A count limit on one input field, read from bounds[setting] at call time; published in the
    operation's input schema (apps.operations.schema). `message`: the refusal's words, with {maximum}."""

    field: str
    setting: str
    message: str = "{field}: at most {maximum} per call"


@dataclass(frozen=True)
class Wait:
    """What a waiting operation's answer still waits for: a wake-up on any of `keys` (apps.events.wake), until
    `deadline`."""

    keys: tuple[str, ...]
    deadline: datetime


@dataclass(frozen=True)
class Operation:
    name: str
    summary: str
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    op_class: OpClass
    ceiling: Ceiling
    role: str
    handler: Callable[..., Any]
    scope: Scope
    preview: Callable[..., Preview] | None = None
    confirm: ConfirmRule[Any] = NEVER
    # resolves what the input names within the caller's reach, onto ctx.targets (gate step 4; see above)
    targets: Callable[..., Any] | None = None
    # checks against the world outside the database (a mail server's login): run after every other check and
    # before the handler's transaction opens, so no transaction stays open waiting on the network
    verify: Callable[..., None] | None = None
    # (ctx, data) -> what the handler needs from work done outside its transaction (summaries computed by Celery
    # workers; the page a read lists): run after every check and `verify`, before the handler's transaction opens,
    # so no transaction stays open while it waits, and a read whose rows come from here leaves its transaction
    # nothing but its event (apps.gate.dispatch); the gate puts its result on ctx.gathered. A refusal (OakenError)
    # passes through.
    gather: Callable[..., Any] | None = None
    # (ctx, data) -> whether this input's idempotency_key already made what it asks for: a retry (after a timeout,
    # say) then runs without asking for confirmation again, before any token is looked at, and answers as the first
    completed: Callable[..., bool] | None = None
    # its result may name an outbound request waiting for a person: `request_id`, and `approval_url` (the console
    # page where they decide) exactly while it waits; a door may ask the client to open that page
    awaits_approval: bool = False
    bounds: tuple[Bound, ...] = ()
    changes_read_state: bool = False
    # offered to OAuth connections only, never to API keys (a person's own settings)
    person_bound: bool = False
    plugin: str | None = None
    # takes an `idempotency_key` input field (send requests)
    idempotent_input: bool = False
    # its output holds a secret shown once (a new API key): never stored, so never replayed
    returns_secret: bool = False
    callers: Callers = Callers.ANY
    # the handler commits its work in batches of its own (an import): the gate runs it outside a transaction,
    # so its progress shows and a failure keeps the batches it finished, and audits it after it returns
    commits_in_batches: bool = False
    # (output) -> what its answer waits for, or None when the answer is final: a wait's first answer found nothing
    # yet, and a door calls it again (the whole gate) when one of the keys is woken or at the deadline
    # (apps.gate.waiting, apps.events.wake)
    waits: Callable[[dict[str, Any]], Wait | None] | None = None
    # its answer gives the caller mail written by others (a message's text, subject or start): the gate keeps, for
    # an agent's credential, which messages it was given (apps.operations.reads; SPEC §23)
    returns_mail: bool = False
    # its handler is made of other operations' calls (ctx.call: each through the whole gate as the same caller, each
    # with its own audit event, inside this call's transaction): persons only, so no agent's call ever runs another
    composes: bool = False
    description: str = field(default="", compare=False)

    @property
    def default_level(self) -> str:
        """The exposure an agent meets when no tenant setting exists (plugins start off)."""
        if self.ceiling == Ceiling.NEVER:
            return "never"
        return "off" if self.plugin else self.ceiling.value


class Registry:
    def __init__(self) -> None:
        self._ops: dict[str, Operation] = {}

    def add(self, op: Operation) -> Operation:
        check_definition(op, existing=self._ops)
        self._ops[op.name] = op
        return op

    def get(self, name: str) -> Operation | None:
        return self._ops.get(name)

    def __iter__(self) -> Iterator[Operation]:
        return iter(sorted(self._ops.values(), key=lambda op: op.name))

    def __contains__(self, name: object) -> bool:
        return name in self._ops

    def remove(self, name: str) -> None:
        """Forget an operation (tests that define throwaway operations clean up after themselves)."""
        self._ops.pop(name, None)

    @property
    def internal_events(self) -> Mapping[str, str]:
        """The events the system appends outside the gate (apps.audit.events), name -> what they record."""
        return INTERNAL_EVENTS


registry = Registry()


def _module_imports(module_name: str) -> set[str]:
    module = sys.modules.get(module_name)
    if module is None:
        return set()
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError):
        return set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _closed(model: type[BaseModel]) -> bool:
    return model.model_config.get("extra") == "forbid"


def check_definition(op: Operation, *, existing: dict[str, Operation]) -> None:
    """Raise DefinitionError when `op` breaks a rule of SPEC §3."""
    if not _NAME.match(op.name):
        raise DefinitionError(f"{op.name!r}: names are snake_case (plugins: <plugin>.<name>)")
    if op.name in existing:
        raise DefinitionError(f"{op.name!r}: an operation with this name is already defined")
    if op.name in INTERNAL_EVENTS:
        raise DefinitionError(f"{op.name!r}: an internal audit event has this name (apps.audit.events)")
    for model in (op.input_model, op.output_model):
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or not _closed(model):
            raise DefinitionError(f"{op.name!r}: input and output models must forbid extra fields")
    if op.op_class == OpClass.SEND and op.ceiling != Ceiling.NEVER:
        raise DefinitionError(f"{op.name!r}: a send operation can never be offered to agents")
    for bound in op.bounds:
        if bound.field not in op.input_model.model_fields:
            # the gate would find nothing to count, and the published schemas nothing to bound
            raise DefinitionError(f"{op.name!r}: a bound names {bound.field!r}, which is not a field of its input")
    if op.op_class == OpClass.READ:
        if op.changes_read_state:
            raise DefinitionError(f"{op.name!r}: a read operation cannot change read state")
        if any(
            i == READ_STATE_SERVICE or i.startswith(READ_STATE_SERVICE + ".")
            for i in _module_imports(op.handler.__module__)
        ):
            raise DefinitionError(f"{op.name!r}: a read operation's module reaches the read-state service")
    if op.op_class == OpClass.MUTATE and op.ceiling != Ceiling.NEVER and op.preview is None:
        raise DefinitionError(f"{op.name!r}: a mutation offered to agents needs a preview")
    if op.callers != Callers.ANY:
        if op.ceiling != Ceiling.NEVER:
            raise DefinitionError(f"{op.name!r}: an operation for {op.callers} only can never be offered to agents")
        if op.plugin is not None:
            raise DefinitionError(f"{op.name!r}: plugin operations are for every caller their ceiling allows")
        if op.callers == Callers.INTERNAL and (op.person_bound or op.idempotent_input or op.returns_secret):
            raise DefinitionError(f"{op.name!r}: an internal operation belongs to no person and returns no secret")
    if op.returns_mail and op.op_class != OpClass.READ:
        raise DefinitionError(f"{op.name!r}: only a read returns mail to be recorded as read")
    if op.composes and op.callers != Callers.PERSONS:
        raise DefinitionError(f"{op.name!r}: only an operation for persons may run other operations")
    if op.awaits_approval and (
        op.op_class == OpClass.READ or not {"request_id", "approval_url"} <= set(op.output_model.model_fields)
    ):
        raise DefinitionError(f"{op.name!r}: a request awaiting approval is made by a change whose output names it")
    if op.gather is not None and op.commits_in_batches:
        raise DefinitionError(
            f"{op.name!r}: an operation that commits in batches does its own work outside a transaction"
        )
    if op.completed is not None and not op.idempotent_input:
        raise DefinitionError(f"{op.name!r}: only an operation that takes an idempotency_key can find it completed")
    if op.commits_in_batches:
        if op.op_class == OpClass.READ:
            raise DefinitionError(f"{op.name!r}: a read commits nothing, in batches or otherwise")
        if op.ceiling != Ceiling.NEVER:
            raise DefinitionError(f"{op.name!r}: an operation that commits in batches can never be offered to agents")
        if op.idempotent_input:
            raise DefinitionError(f"{op.name!r}: an idempotency key is claimed in the call's one transaction")
    if op.plugin is not None:
        if not op.name.startswith(op.plugin + "."):
            raise DefinitionError(f"{op.name!r}: plugin operations are named <plugin>.<name>")
        if op.ceiling == Ceiling.ON:
            raise DefinitionError(f"{op.name!r}: plugin operations cannot be on by default")
        if op.changes_read_state:
            raise DefinitionError(f"{op.name!r}: plugin operations cannot mark mail read")
    elif "." in op.name:
        raise DefinitionError(f"{op.name!r}: only plugin operations are namespaced")


def operation(
    *,
    name: str,
    summary: str,
    input: type[BaseModel],
    output: type[BaseModel],
    op_class: OpClass,
    ceiling: Ceiling,
    role: str = "MEMBER",
    scope: Scope | None = None,
    preview: Callable[..., Preview] | None = None,
    confirm: ConfirmRule[Any] = NEVER,
    targets: Callable[..., Any] | None = None,
    verify: Callable[..., None] | None = None,
    gather: Callable[..., Any] | None = None,
    completed: Callable[..., bool] | None = None,
    awaits_approval: bool = False,
    bounds: tuple[Bound, ...] = (),
    changes_read_state: bool = False,
    person_bound: bool = False,
    plugin: str | None = None,
    idempotent_input: bool = False,
    returns_secret: bool = False,
    callers: Callers = Callers.ANY,
    commits_in_batches: bool = False,
    waits: Callable[[dict[str, Any]], Wait | None] | None = None,
    returns_mail: bool = False,
    composes: bool = False,
    target: Registry | None = None,
) -> Callable[[Callable[..., Any]], Operation]:
    """Define and register an operation around its handler."""

    def define(handler: Callable[..., Any]) -> Operation:
        op = Operation(
            name=name,
            summary=summary,
            input_model=input,
            output_model=output,
            op_class=op_class,
            ceiling=ceiling,
            role=role,
            handler=handler,
            scope=scope or _SCOPE_OF_CLASS[op_class],
            preview=preview,
            confirm=confirm,
            targets=targets,
            verify=verify,
            gather=gather,
            completed=completed,
            awaits_approval=awaits_approval,
            bounds=bounds,
            changes_read_state=changes_read_state,
            person_bound=person_bound,
            plugin=plugin,
            idempotent_input=idempotent_input,
            returns_secret=returns_secret,
            callers=callers,
            commits_in_batches=commits_in_batches,
            waits=waits,
            returns_mail=returns_mail,
            composes=composes,
            description=inspect.getdoc(handler) or "",
        )
        return (target or registry).add(op)

    return define
