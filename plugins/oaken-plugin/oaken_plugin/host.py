"""The process a plugin's handlers run in: `python -I -m oaken_plugin.host <module:attribute> [--site FOLDER]...`.

Oaken starts it inside an operating-system sandbox (no network, a read-only filesystem of only the Python
installation and the plugin's packages, an unprivileged user, a system call filter, limits) with an environment
that holds no server address and no secret, one tenant's calls per process. Nothing here guards anything: the
kernel does, and Oaken checks every answer. This module only speaks the protocol, JSON lines on stdin and
stdout, every request and answer carrying the request's id:

Requests: {"id", "kind": "describe"} | {"id", "kind": "health"} | {"id", "kind": "fence"} |
          {"id", "kind": "preview", "operation", "input"} |
          {"id", "kind": "call", "operation", "input", "settings", "now", "parts"}
Answers:  {"id", "ok": true, "result": ...} | {"id", "ok": false, "error": "<a built-in exception's name>"}

A fence is answered at once ("fence"): Oaken asks one after each call, so that a line the process was still to
write for that call comes before the fence's answer, never into the next call.
The first line, once the plugin is imported, is {"id": "ready", "ok": true, "result": "ready"} (or the failure).
What leaves the process for an exception is the name of the nearest built-in exception class it derives from,
never its message (it could quote mail), nor a name of the plugin's choosing.
"""

from __future__ import annotations

import builtins
import importlib
import json
import os
import site
import sys
from datetime import datetime
from typing import Any


def _type_of(exc: BaseException) -> str:
    """The nearest built-in exception class of `exc` (a plugin's own class names are its own words)."""
    for cls in type(exc).__mro__:
        if cls.__module__ == "builtins" and getattr(builtins, cls.__name__, None) is cls:
            return cls.__name__
    return "Exception"


def _answer(plugin: Any, request: dict[str, Any]) -> Any:
    from oaken_plugin import Part, Plugin, Service

    if not isinstance(plugin, Plugin):
        raise TypeError("the entry point does not name a Plugin")
    kind = request.get("kind")
    if kind == "fence":
        return "fence"
    if kind == "describe":
        return plugin.describe()
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


def _send(channel: Any, answer: dict[str, Any]) -> None:
    try:
        text = json.dumps(answer)
    except (TypeError, ValueError):
        text = json.dumps({"id": answer.get("id"), "ok": False, "error": "TypeError"})
    channel.write(text + "\n")
    channel.flush()


def main() -> None:
    args = sys.argv[1:]
    target = args[0]
    sites = [args[i + 1] for i in range(1, len(args) - 1) if args[i] == "--site"]
    # the protocol keeps the real stdout; anything the plugin prints goes to stderr (which Oaken discards)
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    requests = sys.stdin
    for folder in sites:
        site.addsitedir(folder)
    module_name, _, attribute = target.partition(":")
    try:
        plugin = getattr(importlib.import_module(module_name), attribute)
    except BaseException as exc:
        _send(channel, {"id": "ready", "ok": False, "error": _type_of(exc)})
        raise SystemExit(3) from None
    _send(channel, {"id": "ready", "ok": True, "result": "ready"})
    for line in requests:
        request: Any = None
        try:
            request = json.loads(line)
            answer = {"id": request.get("id"), "ok": True, "result": _answer(plugin, request)}
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            answer = {"id": request.get("id") if isinstance(request, dict) else None, "ok": False}
            answer["error"] = _type_of(exc)
        _send(channel, answer)


if __name__ == "__main__":
    main()
