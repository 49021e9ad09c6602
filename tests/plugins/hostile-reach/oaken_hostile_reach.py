"""Reaches for the Oaken process that started it (its pid given as input, as a plugin could learn it): its
limits, priority, CPUs, signals, pidfd signals, ptrace, its memory; and every process of its user and group."""

from __future__ import annotations

import ctypes
import os
import resource
import signal
from collections.abc import Callable
from typing import Any

from oaken_plugin import Closed, Plugin, Service
from pydantic import Field

plugin = Plugin(name="reacher", version="0.1")
SYS_PIDFD_OPEN, SYS_PIDFD_SEND_SIGNAL, SYS_PROCESS_VM_READV, SYS_KCMP = 434, 424, 310, 312
PTRACE_DETACH, PTRACE_SEIZE = 17, 0x4206


class ReachIn(Closed):
    oaken_pid: int = Field(ge=1)


class Reached(Closed):
    tried: dict[str, str]


def attempt(what: Callable[[], object]) -> str:
    try:
        what()
    except BaseException as exc:
        return type(exc).__name__
    return "worked"


def syscall(number: int, *args: Any) -> Callable[[], None]:
    def call() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall(number, *args) < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))

    return call


def _pidfd_signal(pid: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(SYS_PIDFD_OPEN, pid, 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "pidfd_open")
    if libc.syscall(SYS_PIDFD_SEND_SIGNAL, fd, signal.SIGCONT, None, 0) < 0:
        raise OSError(ctypes.get_errno(), "pidfd_send_signal")


def _seize(pid: int) -> Callable[[], None]:
    def seize() -> None:
        syscall(101, PTRACE_SEIZE, pid, 0, 0)()
        syscall(101, PTRACE_DETACH, pid, 0, 0)()

    return seize


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read(1)


def _vm_read(pid: int) -> None:
    buffer = ctypes.create_string_buffer(16)
    local = (ctypes.c_void_p * 2)(ctypes.addressof(buffer), 16)
    remote = (ctypes.c_void_p * 2)(0x400000, 16)
    syscall(SYS_PROCESS_VM_READV, pid, local, 1, remote, 1, 0)()


@plugin.operation(name="reach", summary="Touch the Oaken process.", input=ReachIn, output=Reached)
def reach(service: Service, data: ReachIn) -> Reached:
    pid = data.oaken_pid
    tried = {
        # what a hostile plugin does to a process it reaches: its core size, nice value and CPUs are changed (the
        # test looks at them afterwards); signals are SIGCONT (the permission check is that of any signal)
        "prlimit": attempt(lambda: resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))),
        "prlimit read": attempt(lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE)),
        "setpriority": attempt(lambda: os.setpriority(os.PRIO_PROCESS, pid, 19)),
        "setpriority of its group": attempt(lambda: os.setpriority(os.PRIO_PGRP, pid, 19)),
        "sched_setaffinity": attempt(lambda: os.sched_setaffinity(pid, {0})),
        "kill": attempt(lambda: os.kill(pid, signal.SIGCONT)),
        "kill its group": attempt(lambda: os.killpg(pid, signal.SIGCONT)),
        "pidfd_send_signal": attempt(lambda: _pidfd_signal(pid)),
        "ptrace seize": attempt(_seize(pid)),
        "process_vm_readv": attempt(lambda: _vm_read(pid)),
        "kcmp": attempt(syscall(SYS_KCMP, pid, pid, 0, 0, 0)),
        "its /proc": attempt(lambda: os.listdir(f"/proc/{pid}")),
        "its memory": attempt(lambda: _read(f"/proc/{pid}/mem")),
    }
    return Reached(tried=tried)
