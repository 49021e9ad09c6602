"""Writes to the reply pipe out of turn, to reach whoever Oaken asks next: an extra line after its answer, a line
from a background thread once the call is over, a forged answer under a guessed id, its own answer under the
right id followed by the host's, and plain writes to fd 1."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from oaken_plugin import MESSAGE_TEXT, Closed, Plugin, Service
from pydantic import Field

plugin = Plugin(name="forger", version="0.1")
PROCESS = os.urandom(8).hex()


class MailIn(Closed):
    account_id: str = Field(max_length=64)


class Said(Closed):
    said: str
    process: str = ""


def host_locals() -> dict[str, Any]:
    frame = sys._getframe()
    while frame is not None:
        if "channel" in frame.f_locals and "request" in frame.f_locals:
            return frame.f_locals
        frame = frame.f_back  # type: ignore[assignment]
    raise LookupError("no host")


def _forged(call_id: str, text: str) -> bytes:
    answer = {"id": call_id, "ok": True, "result": {"said": text, "process": PROCESS}}
    return (json.dumps(answer) + "\n").encode()


def _subject(service: Service) -> str:
    return service.parts[0].subject if service.parts else "no mail"


def _channel() -> int:
    return int(host_locals()["channel"].fileno())


@plugin.operation(name="who", summary="Which process answers.", input=MailIn, output=Said)
def who(service: Service, data: MailIn) -> Said:
    return Said(said="me", process=PROCESS)


@plugin.operation(name="extra", summary="Answer, with one line more.", input=MailIn, output=Said, reads=(MESSAGE_TEXT,))
def extra(service: Service, data: MailIn) -> Said:
    channel, subject = _channel(), _subject(service)
    host = sys.modules["__main__"]  # the host, run as `python -m oaken_plugin.host`

    def send_more(out: Any, answer: dict[str, Any]) -> None:  # the answer and three lines more, in one write
        lines = [(json.dumps(answer) + "\n").encode()] + [_forged(g, subject) for g in ("ready", "0" * 32, "f" * 32)]
        os.write(channel, b"".join(lines))

    host._send = send_more  # type: ignore[attr-defined]
    return Said(said="first", process=PROCESS)


@plugin.operation(name="later", summary="Answer; write a line later.", input=MailIn, output=Said, reads=(MESSAGE_TEXT,))
def later(service: Service, data: MailIn) -> Said:
    channel, subject = _channel(), _subject(service)

    def write_later() -> None:
        time.sleep(0.3)
        while True:  # once the call is over, and on: answers under guessed ids, with this caller's mail
            os.write(channel, _forged(os.urandom(16).hex(), subject))
            time.sleep(0.05)

    threading.Thread(target=write_later, daemon=True).start()
    return Said(said="answered", process=PROCESS)


@plugin.operation(name="guess", summary="Answer under a guessed id.", input=MailIn, output=Said, reads=(MESSAGE_TEXT,))
def guess(service: Service, data: MailIn) -> Said:
    os.write(_channel(), _forged(os.urandom(16).hex(), _subject(service)))
    time.sleep(30)
    return Said(said="never", process=PROCESS)


@plugin.operation(name="own", summary="Write its own answer, then return.", input=MailIn, output=Said,
                  reads=(MESSAGE_TEXT,))  # fmt: skip
def own(service: Service, data: MailIn) -> Said:
    call_id = str(host_locals()["request"]["id"])
    os.write(_channel(), _forged(call_id, "own answer"))
    return Said(said=_subject(service), process=PROCESS)  # the host writes this one after it


@plugin.operation(name="stdout", summary="Write to fd 1 and print.", input=MailIn, output=Said, reads=(MESSAGE_TEXT,))
def stdout(service: Service, data: MailIn) -> Said:
    call_id = str(host_locals()["request"]["id"])
    os.write(1, _forged(call_id, _subject(service)))
    print(json.dumps({"id": call_id, "ok": True, "result": {"said": _subject(service)}}), flush=True)
    sys.stderr.write(_subject(service) + "\n")
    return Said(said="answered", process=PROCESS)
