#!/usr/bin/env python3
"""Verify an exported audit chain offline: `python3 chainfile.py chain.jsonl` (docs/audit.md).

This file imports nothing but Python's standard library, so a customer can copy it anywhere and check
Oaken's log without installing (or trusting) Oaken; `oaken audit verify --file` runs the same code, and
Oaken's own chain hashes with the same `canonical_json`.

An export is JSON lines, one event per line, oldest first. Each line is an object with the event's hashed
fields and `hash`: sha256 (hex) over the UTF-8 of the canonical JSON of the object without `hash`. Canonical
JSON: keys sorted, no whitespace (separators "," and ":"), non-ASCII characters as they are (not escaped).
Each event's `prev_hash` is the `hash` of the one before it (64 zeros for the first, `seq` 1), and `seq`
counts up by one.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass

ZERO_HASH = "0" * 64
FIELDS = frozenset(
    {
        "created_at",
        "credential_id",
        "credential_kind",
        "door",
        "input_digest",
        "operation",
        "outcome",
        "person_id",
        "prev_hash",
        "principal",
        "seq",
        "targets",
        "tenant_id",
    }
)

_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def canonical_json(value: object) -> str:
    """The one JSON spelling of a value: sorted keys, no whitespace, non-JSON types as str()."""
    return _ENCODER.encode(value)


def sha256_hex(text: str) -> str:
    # surrogatepass: a lone surrogate (legal in JSON) must digest, not crash
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Report:
    """What a walk of an exported chain found: intact (broken_row None), or the first row that does not hold."""

    events: int
    head_hash: str
    broken_row: int | None = None  # 1-based line number in the file
    broken_seq: int | None = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.broken_row is None

    def as_dict(self) -> dict[str, object]:
        if self.ok:
            return {"ok": True, "events": self.events, "head_hash": self.head_hash}
        return {
            "ok": False,
            "events": self.events,
            "row": self.broken_row,
            "seq": self.broken_seq,
            "reason": self.reason,
        }

    def sentence(self) -> str:
        if self.ok:
            return f"intact, {self.events} events, head hash {self.head_hash}"
        seq = f" (event #{self.broken_seq})" if self.broken_seq is not None else ""
        return f"broken at row {self.broken_row}{seq}: {self.reason}"


def verify_lines(lines: Iterable[str | bytes]) -> Report:
    """Walk an export's lines in order; the first row that is not the next link of the chain is named."""
    previous, seq, tenant, checked = ZERO_HASH, 0, None, 0
    for row, raw in enumerate(lines, start=1):
        text = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw
        if not text.strip():
            continue
        broken = _check(row, text, previous, seq, tenant)
        if isinstance(broken, Report):
            return Report(checked, previous, broken.broken_row, broken.broken_seq, broken.reason)
        previous, seq, tenant = broken
        checked += 1
    return Report(checked, previous)


def _check(row: int, text: str, previous: str, seq: int, tenant: str | None) -> Report | tuple[str, int, str]:
    def broken(reason: str, at: object = None) -> Report:
        return Report(0, "", row, at if isinstance(at, int) and not isinstance(at, bool) else None, reason)

    try:
        event = json.loads(text)
    except ValueError:
        return broken("not a JSON object")
    if not isinstance(event, dict):
        return broken("not a JSON object")
    at = event.get("seq")
    stored = event.pop("hash", None)
    if set(event) != FIELDS or not isinstance(stored, str):
        return broken("not an audit event (its fields are not the exported ones)", at)
    if at != seq + 1:
        return broken("sequence gap", at)
    if tenant is not None and event["tenant_id"] != tenant:
        return broken("another tenant's event", at)
    if event["prev_hash"] != previous:
        return broken("previous hash mismatch", at)
    if sha256_hex(canonical_json(event)) != stored:
        return broken("hash mismatch", at)
    return stored, at, event["tenant_id"]


def verify_file(path: str) -> Report:
    with open(path, "rb") as file:
        return verify_lines(file)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python3 chainfile.py chain.jsonl", file=sys.stderr)
        return 2
    report = verify_file(argv[0])
    print(report.sentence())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
