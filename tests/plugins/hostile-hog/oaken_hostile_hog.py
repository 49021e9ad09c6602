"""Takes more than its share: memory (on its heap, and where an address-space limit does not look: System V
shared memory and message queues, memfd files), CPU (in its call, and in a thread left running after it), threads,
and answers too large or too deeply nested for its reader."""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable

from oaken_plugin import Closed, Plugin, Service
from pydantic import Field

plugin = Plugin(name="hog", version="0.1")
PROCESS = os.urandom(8).hex()
_HELD: list[object] = []


class Amount(Closed):
    n: int = Field(default=0, ge=0, le=1 << 40)


class Took(Closed):
    took: int
    process: str
    tried: dict[str, str] = Field(default_factory=dict)


def attempt(what: Callable[[], object]) -> str:
    try:
        what()
    except BaseException as exc:
        return type(exc).__name__
    return "worked"


@plugin.operation(name="token", summary="Which process answers.", input=Amount, output=Took)
def token(service: Service, data: Amount) -> Took:
    return Took(took=os.getpid(), process=PROCESS)


@plugin.operation(name="memory", summary="Allocate n MB on the heap.", input=Amount, output=Took)
def memory(service: Service, data: Amount) -> Took:
    for _ in range(data.n):
        _HELD.append(bytearray(1 << 20))  # kept: the process holds it after the call
    return Took(took=data.n, process=PROCESS)


def _sysv_shm(mb: int) -> int:
    """Segments of 64 MB, each attached, touched and detached: the pages stay with the segment."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    held = 0
    while held < mb:
        segment = libc.shmget(0, 64 << 20, 0o1600)  # IPC_PRIVATE | IPC_CREAT
        if segment < 0:
            raise OSError(ctypes.get_errno(), "shmget")
        address = libc.shmat(segment, None, 0)
        if address is None or address == ctypes.c_void_p(-1).value:
            raise OSError(ctypes.get_errno(), "shmat")
        ctypes.memset(address, 1, 64 << 20)
        libc.shmdt(ctypes.c_void_p(address))
        held += 64
    return held


def _memfd(mb: int) -> int:
    """Files of memory (each within the file-size limit), written, never mapped."""
    held, chunk = 0, b"\1" * (1 << 20)
    while held < mb:
        fd = os.memfd_create("hog")
        for _ in range(8):
            os.write(fd, chunk)
        _HELD.append(fd)
        held += 8
    return held


def _message_queues(mb: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    held, message = 0, ctypes.create_string_buffer(8 + 8000)
    ctypes.memmove(message, (1).to_bytes(8, "little"), 8)
    while held < mb * 1024:
        queue = libc.msgget(0, 0o1600)
        if queue < 0:
            raise OSError(ctypes.get_errno(), "msgget")
        for _ in range(2):
            if libc.msgsnd(queue, message, 8000, 0o4000) < 0:  # IPC_NOWAIT
                raise OSError(ctypes.get_errno(), "msgsnd")
            held += 8
    return held


@plugin.operation(name="hidden", summary="Hold n MB where the address-space limit does not look.", input=Amount,
                  output=Took)  # fmt: skip
def hidden(service: Service, data: Amount) -> Took:
    tried = {
        "System V shared memory": attempt(lambda: _sysv_shm(data.n)),
        "memfd": attempt(lambda: _memfd(data.n)),
        "message queues": attempt(lambda: _message_queues(data.n)),
    }
    return Took(took=data.n, process=PROCESS, tried=tried)


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


@plugin.operation(name="burn", summary="Burn n seconds of CPU time in the call.", input=Amount, output=Took)
def burn(service: Service, data: Amount) -> Took:
    _spin(data.n)
    return Took(took=data.n, process=PROCESS)


@plugin.operation(name="spin", summary="Leave a thread burning CPU after answering.", input=Amount, output=Took)
def spin(service: Service, data: Amount) -> Took:
    threading.Thread(target=_spin, args=(1e9,), daemon=True).start()
    return Took(took=os.getpid(), process=PROCESS)


@plugin.operation(name="threads", summary="Start n threads.", input=Amount, output=Took)
def threads(service: Service, data: Amount) -> Took:
    started = 0
    stop = threading.Event()
    try:
        for _ in range(data.n):
            threading.Thread(target=stop.wait, daemon=True).start()
            started += 1
    except RuntimeError:
        pass
    alive = threading.active_count()
    stop.set()
    return Took(took=started, process=PROCESS, tried={"alive": str(alive)})


@plugin.operation(name="huge", summary="Answer with n bytes.", input=Amount, output=Took)
def huge(service: Service, data: Amount) -> Took:
    return Took(took=0, process="x" * data.n)


@plugin.operation(name="deep", summary="Answer with a value nested n deep.", input=Amount, output=Took)
def deep(service: Service, data: Amount) -> Took:
    import sys

    host = sys.modules["__main__"]  # the host, run as `python -m oaken_plugin.host`
    send = host._send

    def send_deep(out: object, answer: dict[str, object]) -> None:  # json.dumps would refuse: write it by hand
        head = f'{{"id": "{answer["id"]}", "ok": true, "result": '
        out.write(head + "[" * data.n + "]" * data.n + "}\n")  # type: ignore[attr-defined]
        out.flush()  # type: ignore[attr-defined]

    host._send = send_deep  # type: ignore[attr-defined]
    del send
    return Took(took=data.n, process=PROCESS)
