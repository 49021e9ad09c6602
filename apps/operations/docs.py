"""docs/operations.md, generated from the registry (a test fails when the file is stale)."""

from __future__ import annotations

import json
from pathlib import Path

from apps.operations.registry import Operation, registry

DOC_PATH = Path(__file__).resolve().parent.parent.parent / "docs" / "operations.md"


def _fields(op: Operation) -> str:
    schema = op.input_model.model_json_schema()
    props = schema.get("properties", {})
    if not props:
        return "none"
    required = set(schema.get("required", []))
    parts = []
    for name, spec in props.items():
        kind = spec.get("type") or " | ".join(
            str(s.get("type", s.get("$ref", "?")).split("/")[-1]) for s in spec.get("anyOf", [])
        )
        if "enum" in spec:
            kind = " | ".join(json.dumps(v) for v in spec["enum"])
        parts.append(f"`{name}`{'' if name in required else '?'}: {kind}")
    return ", ".join(parts)


def _confirmation(op: Operation) -> str:
    rule = op.confirm
    if op.op_class != "mutate":
        return "—"
    if rule.kind == "above":
        return f"above `{rule.threshold_setting}` items"
    return {"always": "always", "never": "never", "when": "when the input asks for it"}[rule.kind]


def render() -> str:
    """The operation reference as Markdown."""
    lines = [
        "# Operation reference",
        "",
        "Generated from the registry by `oaken ops docs`; do not edit by hand.",
        "Ceilings: `never` (not offered to agents whatever the settings), `off` (offered once an ADMIN",
        "switches it on), `on` (offered by default). Agents also need the scope and the person's role.",
        "Callers: `any` (persons, agents within the ceiling, the system), `persons` (people only), `internal`",
        "(the system's own Celery tasks on the internal door: refused to persons and agents, no REST path),",
        "`server` (the server's own side: a person at its command line, `oaken`, and the system's tasks; no REST",
        "path, for inputs that name the server's files), `invitees` (a person in the console following an invitation",
        "link to its tenant, member or not yet: the one operation that asks no role).",
        "",
        "| operation | class | scope | ceiling | role | callers | confirmation | input | summary |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for op in registry:
        lines.append(
            f"| `{op.name}` | {op.op_class.value} | {op.scope.value} | {op.ceiling.value} | {op.role} | "
            f"{op.callers.value} | {_confirmation(op)} | {_fields(op)} | {op.summary} |"
        )
    lines += [
        "",
        "## Internal events",
        "",
        "Audit events the system appends outside the gate, under these names only (`apps/audit/events.py`);",
        "no operation takes them.",
        "",
    ]
    lines += [f"- `{name}`: {what}" for name, what in sorted(registry.internal_events.items())]
    return "\n".join(lines) + "\n"
