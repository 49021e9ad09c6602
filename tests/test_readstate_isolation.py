"""Only mark_read, mark_unread and summarize_messages reach the read-state service (SPEC §9).

The registry, the gate and the plugin bridge must not import it, directly or through
anything they import, so no check or bridge can mark mail read on its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

from apps.operations.registry import OpClass, registry

ROOT = Path(__file__).resolve().parent.parent
READ_STATE = "apps.mail.readstate"


def _module_file(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _imports(name: str) -> set[str]:
    path = _module_file(name)
    if path is None:
        return set()
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {m for m in found if m.split(".")[0] in {"apps", "config"}}


def _reaches(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(_imports(name))
    return seen


def _gate_modules() -> list[str]:
    return [
        "apps.gate." + str(p.relative_to(ROOT / "apps" / "gate").with_suffix("")).replace("/", ".")
        for p in (ROOT / "apps" / "gate").rglob("*.py")
        if "migrations" not in p.parts
    ]


def test_the_registry_the_gate_and_the_plugin_bridge_never_reach_the_read_state_service() -> None:
    starts = ["apps.operations.registry", "apps.operations.plugins", "apps.operations.context", *_gate_modules()]
    assert len(starts) > 8
    for start in starts:
        reached = _reaches(start)
        assert READ_STATE not in reached, f"{start} reaches the read-state service"
        assert not any(m.startswith(READ_STATE + ".") for m in reached)


def test_the_walk_would_notice_an_import() -> None:
    # the definitions of mark_read do reach it: the walk is not blind
    assert READ_STATE in _reaches("apps.operations.defs.mail_organize")


def test_only_the_three_operations_declare_read_state_changes() -> None:
    changing = {op.name for op in registry if op.changes_read_state}
    assert changing == {"mark_read", "mark_unread", "summarize_messages"}
    assert all(op.op_class == OpClass.MUTATE for op in registry if op.changes_read_state)
