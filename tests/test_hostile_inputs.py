"""Every operation, fed hostile input: it answers a documented refusal or succeeds, never INTERNAL_ERROR or
something that is not JSON, and every call leaves exactly one audit event.

Inputs are built from each operation's own JSON Schema, field by field: sometimes a value of the declared shape
(real ids of the caller's tenant and of another tenant among them), sometimes a hostile one: NUL and other
characters PostgreSQL cannot store, CR/LF header breaks, lone surrogates, bidirectional and zero-width marks,
100,000 characters, deep nesting, huge numbers, the wrong type, an unknown field.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.audit.models import AuditEvent
from apps.core.callers import Caller
from apps.core.errors import HTTP_STATUS, OakenError
from apps.core.kinds import CredentialKind, Door
from apps.gate.dispatch import dispatch
from apps.mail.importing import import_mail
from apps.mail.models import MailAccount, Message, Thread
from apps.operations.registry import Callers, Operation, registry
from tests.callers import as_person, membership
from tests.conftest import Person
from tests.mailfactory import raw_message, write_mbox

HOSTILE_STRINGS = (
    "",
    " ",
    "\x00",
    "a\x00b",
    "a\r\nBcc: evil@example.test",
    "line\nbreak",
    "\ud800",
    "x\udfffy",
    "\u202eevil\u202c\u200b\ufeff",
    "x" * 100_000,
    "1e30",
    "-1",
    "../../../../etc/passwd",
    "<script>alert(1)</script>",
    "%s%n{0}${x}",
    "\U0001f600" * 10,
    "INBOX",
    "default",
)
HOSTILE_INTS = (0, -1, 1, 2, 10**6, 2**31, 2**63, -(2**63) - 1, 10**30)
# what a refusal may be: every documented code but the one that means a bug
DOCUMENTED = set(HTTP_STATUS) - {"INTERNAL_ERROR"}
# these test a mail server before anything is saved: their hosts would be looked up on a network there is none of
NEEDS_THE_NETWORK = {"connect_mailbox", "update_mailbox_credentials"}
OPERATIONS = [op for op in registry if op.name not in NEEDS_THE_NETWORK and op.plugin is None]


def _deep(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


class Shapes:
    """Draws an input for a JSON Schema, mixing values of the declared shape with hostile ones."""

    def __init__(self, ids: list[str]) -> None:
        self.ids = ids

    def hostile(self) -> st.SearchStrategy[Any]:
        return st.one_of(
            st.sampled_from(HOSTILE_STRINGS),
            st.sampled_from(HOSTILE_INTS),
            st.just(None),
            st.just(_deep(300)),
            st.just({"nested": {"deeper": ["x"]}}),
            st.just(1e308),
            st.booleans(),
        )

    def value(self, draw: Any, schema: dict[str, Any], defs: dict[str, Any], name: str, depth: int = 0) -> Any:
        if "$ref" in schema:
            schema = defs[schema["$ref"].rsplit("/", 1)[1]]
        if depth > 4 or draw(st.integers(0, 4)) == 0:
            return draw(self.hostile())
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return self.value(draw, draw(st.sampled_from(schema[key])), defs, name, depth + 1)
        if "enum" in schema:
            return draw(st.sampled_from(schema["enum"]))
        if "const" in schema:
            return schema["const"]
        kind = schema.get("type")
        if kind == "string":
            if name.endswith("id") or name.endswith("ids"):
                return draw(st.sampled_from(self.ids))
            if schema.get("format") == "date-time":
                return draw(st.sampled_from(["2026-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00"]))
            if schema.get("format") == "date":
                return draw(st.sampled_from(["2026-01-01", "0001-01-01", "9999-12-31"]))
            return draw(st.one_of(st.sampled_from(HOSTILE_STRINGS), st.text(max_size=30)))
        if kind == "integer":
            bounds = [schema[k] for k in ("minimum", "maximum") if k in schema]
            return draw(st.sampled_from([*bounds, *HOSTILE_INTS]))
        if kind == "number":
            return draw(st.sampled_from([0.0, -1.5, 1e308, 3.5]))
        if kind == "boolean":
            return draw(st.booleans())
        if kind == "array":
            items = schema.get("items", {})
            count = draw(st.sampled_from([0, 1, 2, 3, 600]))
            if count == 600:
                return [draw(st.sampled_from(self.ids))] * count
            return [self.value(draw, items, defs, name, depth + 1) for _ in range(count)]
        if kind == "object" or "properties" in schema:
            return self.object(draw, schema, defs, depth + 1)
        return draw(self.hostile())

    def object(self, draw: Any, schema: dict[str, Any], defs: dict[str, Any], depth: int = 0) -> dict[str, Any]:
        properties = schema.get("properties", {})
        required = set(schema.get("required", ()))
        found: dict[str, Any] = {}
        for field, sub in properties.items():
            if field in required or draw(st.booleans()):
                found[field] = self.value(draw, sub, defs, field, depth)
        if draw(st.integers(0, 9)) == 0:
            found["not_a_field"] = "x"
        return found


@pytest.fixture
def ids(alice: Person, mallory: Person, tmp_path: Path) -> list[str]:
    """Real ids of both tenants, and ids of nothing."""
    for person in (alice, mallory):
        mbox = write_mbox(
            tmp_path / f"{person.user.pk}.mbox",
            [
                raw_message(subject="First", message_id=f"<a-{person.user.pk}@example.test>"),
                raw_message(
                    subject="Re: First",
                    message_id=f"<b-{person.user.pk}@example.test>",
                    in_reply_to=f"<a-{person.user.pk}@example.test>",
                ),
            ],
        )
        import_mail(tenant=person.tenant, workspace=person.workspace, account_name="local", path=mbox)
    found: list[str] = [str(uuid.uuid4()), "not-an-id", "\x00"]
    for person in (alice, mallory):
        found += [str(pk) for pk in MailAccount.objects.for_tenant(person.tenant).values_list("pk", flat=True)]
        found += [str(pk) for pk in Message.objects.for_tenant(person.tenant).values_list("pk", flat=True)]
        found += [str(pk) for pk in Thread.objects.for_tenant(person.tenant).values_list("pk", flat=True)]
    return found


def _caller(op: Operation, alice: Person) -> tuple[Caller, Door]:
    if op.callers == Callers.INTERNAL:
        return Caller.internal(alice.tenant), Door.INTERNAL
    if op.callers == Callers.STANDING:  # what a person set up, acting by itself (an automatic reply of theirs)
        standing = Caller.standing(membership(alice), kind=CredentialKind.AUTOREPLY, source_id=str(uuid.uuid4()))
        return standing, Door.INTERNAL
    if op.callers == Callers.SERVER:  # the server's own side: a person at its command line
        return as_person(alice), Door.CLI
    return as_person(alice), Door.UI


def _events(person: Person) -> int:
    return AuditEvent.objects.for_tenant(person.tenant).count()


@pytest.mark.parametrize("op", OPERATIONS, ids=[op.name for op in OPERATIONS])
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_hostile_input_is_refused_in_the_error_shape_or_served(
    op: Operation, data: st.DataObject, alice: Person, mallory: Person, ids: list[str]
) -> None:
    schema = op.input_model.model_json_schema()
    shapes = Shapes(ids)
    raw = shapes.object(data.draw, schema, schema.get("$defs", {}))
    caller, door = _caller(op, alice)
    before, theirs = _events(alice), _events(mallory)
    answer: dict[str, Any]
    code = None
    try:
        answer = dispatch(caller, door, op.name, raw, confirm=True).output
    except OakenError as refusal:
        answer, code = refusal.as_dict(), refusal.code
    assert code is None or code in DOCUMENTED, (op.name, answer)
    json.dumps(answer)
    assert _events(alice) == before + 1
    assert _events(mallory) == theirs
