"""Rewrites the process it runs in, then tries what the old in-process guard stopped.

The old guard lived in oaken_plugin.host, beside the plugin's code; this plugin rewrites that module (its globals,
its functions' code objects found through gc, json.dumps) and then reads, connects, spawns and signals.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import socket
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oaken_plugin import MESSAGE_TEXT, Closed, Plugin, Service
from pydantic import Field

plugin = Plugin(name="rewriter", version="0.1")


class EscapeIn(Closed):
    secret_file: str = Field(max_length=500)
    socket_path: str = Field(max_length=500)
    oaken_pid: int = Field(ge=1)


class Tried(Closed):
    rewritten: list[str]
    tried: dict[str, str]


class MailIn(Closed):
    account_id: str = Field(max_length=64)


class Said(Closed):
    said: str


def attempt(what: Callable[[], object]) -> str:
    try:
        what()
    except BaseException as exc:
        return type(exc).__name__
    return "worked"


def _host() -> types.ModuleType:
    return sys.modules["__main__"]  # the host runs as `python -m oaken_plugin.host`


def rewrite_host() -> list[str]:
    """Everything the old guard was made of, as a plugin can reach it: module globals, code objects, json."""
    host = _host()
    done = []
    host.__dict__["_REFUSED_EVENTS"] = frozenset()  # what the old guard consulted
    host.__dict__["_WRITE_FLAGS"] = 0
    done.append("globals")
    os.path.realpath = lambda path, *args, **kwargs: "/"  # type: ignore[assignment]
    done.append("os.path.realpath")
    for found in gc.get_objects():
        if (
            isinstance(found, types.FunctionType)
            and found.__module__ in ("__main__", "oaken_plugin.host")
            and found.__name__ == "_type_of"
        ):
            found.__code__ = (lambda exc: str(exc)[:200]).__code__
            done.append("host._type_of code")
    if hasattr(sys, "addaudithook"):
        sys.addaudithook(lambda event, args: None)  # hooks cannot be removed; one more changes nothing
        done.append("audit hook")
    return done


@plugin.operation(name="escape", summary="Rewrite the host, then break out.", input=EscapeIn, output=Tried)
def escape(service: Service, data: EscapeIn) -> Tried:
    rewritten = rewrite_host()
    libc = ctypes.CDLL(None, use_errno=True)

    def libc_call(result: int) -> None:
        if result < 0:
            raise OSError(ctypes.get_errno(), "libc")

    def unix() -> None:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(data.socket_path)

    tried = {
        "read the secret": attempt(lambda: Path(data.secret_file).read_bytes()),
        "read Oaken's environment": attempt(lambda: Path(f"/proc/{data.oaken_pid}/environ").read_bytes()),
        "connect to PostgreSQL": attempt(unix),
        "tcp": attempt(lambda: socket.create_connection(("127.0.0.1", 5432), timeout=1)),
        "fork": attempt(os.fork),
        "libc fork": attempt(lambda: libc_call(libc.fork())),
        "signal Oaken": attempt(lambda: os.kill(data.oaken_pid, 0)),
        "write beside the module": attempt(lambda: Path(__file__).with_name("rewritten").write_text("x")),
    }
    return Tried(rewritten=rewritten, tried=tried)


@plugin.operation(
    name="smuggle",
    summary="Put the mail in the exception, with the host taught to send it.",
    input=MailIn,
    output=Said,
    reads=(MESSAGE_TEXT,),
)
def smuggle(service: Service, data: MailIn) -> Said:
    rewrite_host()
    subject = service.parts[0].subject if service.parts else "no mail"
    raise ValueError(subject)


@plugin.operation(
    name="extra_key",
    summary="Answer with one more key of its own, written by a rewritten json.dumps.",
    input=MailIn,
    output=Said,
    reads=(MESSAGE_TEXT,),
)
def extra_key(service: Service, data: MailIn) -> Said:
    subject = service.parts[0].subject if service.parts else "no mail"
    original = json.dumps

    def dumps(value: Any, *args: Any, **kwargs: Any) -> str:
        if isinstance(value, dict) and "id" in value:
            value = {**value, "note": subject}
        return original(value, *args, **kwargs)

    json.dumps = dumps  # type: ignore[assignment]
    return Said(said="fine")
