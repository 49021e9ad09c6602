"""The mail modules import one another in one direction: no circle, and no service imports the task module.

apps.mail.tasks is the thin Celery interface over the services (import, sync, mirror); a service that needs a
task queued names it, and the Celery app's registry, filled in every process by MailConfig.ready, finds it.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAIL = ROOT / "apps" / "mail"
TASKS = "apps.mail.tasks"
# the task module itself, and the app's wiring that registers it
NOT_SERVICES = {TASKS, "apps.mail.apps"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _mail_modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for path in MAIL.rglob("*.py")
        if "migrations" not in path.parts and "management" not in path.parts
    }


def _imports(path: Path, known: set[str]) -> set[str]:
    """The mail modules this file imports, at its top or inside functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from apps.mail import readstate` imports a module, `from apps.mail.mirror import x` a name
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found.update(name for name in names if name in known)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _mail_modules()
    known = set(modules)
    # a package's __init__ runs before its modules, but imports none of them here: only named imports count
    return {name: _imports(path, known) - {name} for name, path in modules.items()}


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of the graph, as the path that closes it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for target in sorted(graph.get(name, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (found := visit(name)):
            return found
    return None


def test_the_mail_modules_import_one_another_without_a_circle() -> None:
    graph = _graph()
    assert len(graph) > 20
    assert _circle(graph) is None


def test_the_circle_search_would_notice_one() -> None:
    # the circle this layering removed: mirror queued its pushes by importing the task module
    circle = {"mirror": {"tasks"}, "tasks": {"sync", "mirror"}, "sync": {"readstate"}, "readstate": {"mirror"}}
    assert _circle(circle) == ["mirror", "tasks", "mirror"]
    assert _circle({"tasks": {"sync", "mirror"}, "sync": {"readstate", "mirror"}, "readstate": {"mirror"}}) is None


def test_no_mail_service_imports_the_task_module() -> None:
    graph = _graph()
    assert graph[TASKS] >= {"apps.mail.mirror", "apps.mail.sync"}  # the walk does see imports
    importers = sorted(name for name, targets in graph.items() if TASKS in targets and name not in NOT_SERVICES)
    assert importers == []


def test_the_tasks_the_mirror_queues_are_registered_in_a_process_that_never_imported_them() -> None:
    script = (
        "import sys, django\n"
        "django.setup()\n"
        "from celery import current_app\n"
        "from apps.mail.mirror import PUSH_FLAGS_TASK, PUSH_MOVES_TASK\n"
        "print(all(name in current_app.tasks for name in (PUSH_FLAGS_TASK, PUSH_MOVES_TASK)))\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True"
