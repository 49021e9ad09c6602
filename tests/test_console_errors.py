"""Refusals as a person reads them in the console (issue 17, item 8): the one mapping in static/console/lib.js
(plainError) turns what the gate answers into a sentence. Fed the real refusals of every operation in the
registry (missing fields, wrong types at every field, nested list items, a validator's pattern, the domain's own
checks), it never shows a field's path or a regular expression, and it never shows the value that was sent."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from apps.core.errors import OakenError
from apps.core.kinds import Door
from apps.gate.dispatch import dispatch
from apps.operations.registry import registry
from tests.callers import as_person
from tests.conftest import Person

LIB = Path(__file__).resolve().parent.parent / "static" / "console" / "lib.js"
WRONG = [[["wrong-value-7f3a"]]]  # of no field's type: a refusal at that field (or inside it)
_SCRIPT = """
import { plainError } from %s;
let text = "";
for await (const chunk of process.stdin) text += chunk;
const errors = JSON.parse(text);
process.stdout.write(JSON.stringify(errors.map((e) => plainError(e))));
"""
IDENTIFIER = re.compile(r"(?<![@.\w])[a-z][a-z0-9]+(?:[._][a-z0-9]+)+\b")
TECHNICAL = re.compile(r"[\^$\\\[\]{}]|should match|String should|Input should|pattern|regex|type=|model_", re.I)


def _refusal(person: Person, name: str, data: dict[str, Any]) -> dict[str, Any] | None:
    try:
        dispatch(as_person(person), Door.UI, name, data)
    except OakenError as error:
        return error.as_dict()
    return None


def _plain(errors: list[dict[str, Any]]) -> list[str]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is missing (make node_modules/.installed needs it)")
    script = _SCRIPT % json.dumps(LIB.as_uri())
    done = subprocess.run(  # node, on this repository's own module
        [node, "--input-type=module", "-e", script],
        input=json.dumps(errors),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    said: list[str] = json.loads(done.stdout)
    return said


def test_every_operations_refusals_read_as_plain_words(alice: Person, mallory: Person) -> None:
    errors: list[dict[str, Any]] = []
    for op in registry:
        fields = op.input_model.model_fields
        if any(f.is_required() for f in fields.values()):
            errors.append(_refusal(alice, op.name, {}) or {})
        for field in fields:
            errors.append(_refusal(alice, op.name, {field: WRONG, "not_a_field": 1}) or {})
    # a validator's pattern, list items, bounds and the domain's own checks
    policy = {"name": "p", "recipients_per_hour": 5}
    for data in (
        {**policy, "allowed_domains": ["not a domain!"]},
        {**policy, "allowed_addresses": ["x"]},
        {**policy, "allowed_domains": ["example.com"], "recipients_per_hour": 0},
        {**policy},
    ):
        errors.append(_refusal(alice, "create_send_policy", data) or {})
    errors.append(_refusal(alice, "list_outbound", {"cursor": "bm90IGEgY3Vyc29y"}) or {})
    errors.append(_refusal(alice, "get_outbound_request", {"request_id": "0" * 8}) or {})
    errors.append(_refusal(alice, "reject_outbound", {"request_id": "x", "reason": "y" * 1001}) or {})
    refused = [e for e in errors if e and e["code"] != "CONFIRMATION_REQUIRED"]
    assert len(refused) > 200 and {e["code"] for e in refused} >= {"INVALID_INPUT", "LIMIT_EXCEEDED", "NOT_FOUND"}
    assert any("." in e.get("field", "") for e in refused) and any("pattern" in e["message"] for e in refused)

    for error, said in zip(refused, _plain(refused), strict=True):
        shown = f"{error} → {said!r}"
        assert said and said[0].isupper() and said.endswith("."), shown
        assert not IDENTIFIER.search(said), shown  # no field path (imap.password, allowed_domains.0)
        assert not TECHNICAL.search(said), shown  # no regular expression, no validator's own words
        assert "wrong-value-7f3a" not in said and "not a domain!" not in said, shown
