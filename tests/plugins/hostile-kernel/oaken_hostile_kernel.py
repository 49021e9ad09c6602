"""The rest of the kernel's surface: namespaces, mounts, keyrings, io_uring, userfaultfd, perf, bpf, personality,
the kernel log, /proc of its own and of pid 1, devices, setuid mounts, ptys, and an exec with a huge argv."""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oaken_plugin import Closed, Plugin, Service

plugin = Plugin(name="kernel", version="0.1")


class Empty(Closed):
    pass


class Probed(Closed):
    tried: dict[str, str]
    dev: list[str]
    uid: int
    capabilities: str
    no_new_privs: str
    suid_mounts: list[str]
    descriptors: list[str]


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
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error))

    return call


def _write(path: str, text: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text)
    finally:
        os.close(fd)


def _read(path: str, size: int = 100) -> bytes:
    with open(path, "rb") as file:
        return file.read(size)


def _exec_huge() -> None:
    os.execv(sys.executable, [sys.executable, *["x" * 100_000] * 100])  # noqa: S606 - 10 MB of arguments


def _pty() -> None:
    for fd in os.openpty():
        os.close(fd)


def _descriptors() -> set[str]:
    """What its open descriptors are: anything Oaken left open in it (a socket, a file of Oaken's) would show."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            found.add(os.readlink(f"/proc/self/fd/{name}").split("[")[0])
        except OSError:
            continue
    return found


def _status(field: str) -> str:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    return ""


# x86-64 numbers
SYS = {
    "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
    "keyctl": 250, "add_key": 248, "request_key": 249, "io_uring_setup": 425, "userfaultfd": 323,
    "perf_event_open": 298, "bpf": 321, "personality": 135, "syslog": 103, "init_module": 175,
    "kexec_load": 246, "open_by_handle_at": 304, "fsopen": 430, "open_tree": 428, "reboot": 169,
    "swapon": 167, "acct": 163, "sethostname": 170, "settimeofday": 164, "iopl": 172, "ioperm": 173,
    "fanotify_init": 300, "quotactl": 179, "lookup_dcookie": 212, "vhangup": 153,
}  # fmt: skip
ARGUMENTS: dict[str, tuple[Any, ...]] = {
    "unshare": (0x10000000,),  # CLONE_NEWUSER
    "mount": (b"none", b"/tmp", b"tmpfs", 0, None),
    "chroot": (b"/tmp",),
    "keyctl": (0, -3, 0),  # KEYCTL_GET_KEYRING_ID of the session keyring
    "add_key": (b"user", b"oaken", b"secret", 6, -3),
    "io_uring_setup": (1, ctypes.create_string_buffer(120)),
    "userfaultfd": (0,),
    "perf_event_open": (ctypes.create_string_buffer(128), 0, -1, -1, 0),
    "bpf": (0, ctypes.create_string_buffer(64), 64),
    "personality": (0x0040000,),  # ADDR_NO_RANDOMIZE
    "syslog": (3, ctypes.create_string_buffer(4096), 4096),  # SYSLOG_ACTION_READ_ALL
    "sethostname": (b"oaken", 5),
}


@plugin.operation(name="probe", summary="Try the kernel's other doors.", input=Empty, output=Probed)
def probe(service: Service, data: Empty) -> Probed:
    tried = {name: attempt(syscall(number, *ARGUMENTS.get(name, (0, 0, 0)))) for name, number in SYS.items()}
    tried.update(
        {
            "read /dev/kmsg": attempt(lambda: _read("/dev/kmsg")),
            "read /proc/kmsg": attempt(lambda: _read("/proc/kmsg", 1)),
            "write /proc/sys/kernel/hostname": attempt(lambda: _write("/proc/sys/kernel/hostname", b"oaken")),
            "write /proc/sysrq-trigger": attempt(lambda: _write("/proc/sysrq-trigger", b"h")),
            "write /proc/self/oom_score_adj lower": attempt(lambda: _write("/proc/self/oom_score_adj", b"-1000")),
            "write /proc/self/uid_map": attempt(lambda: _write("/proc/self/uid_map", b"0 0 1")),
            "write /proc/self/attr/current": attempt(lambda: _write("/proc/self/attr/current", b"unconfined")),
            "write /proc/self/mem": attempt(lambda: _write("/proc/self/mem", b"x")),
            "read a block device": attempt(lambda: _read("/dev/vda", 1)),
            "/sys": attempt(lambda: os.listdir("/sys")),
            "/proc/1/root": attempt(lambda: os.listdir("/proc/1/root")),
            "/proc/1/environ": attempt(lambda: _read("/proc/1/environ", 1)),
            "its parent is the sandbox's init": str((os.getpid(), os.getppid()) == (2, 1)),
            "other processes": str([p for p in os.listdir("/proc") if p.isdigit() and p != str(os.getpid())]),
            "real-time scheduling": attempt(lambda: os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))),
            "a higher priority": attempt(lambda: os.setpriority(os.PRIO_PROCESS, 0, -10)),
            "setuid 0": attempt(lambda: os.setuid(0)),
            "setgid 0": attempt(lambda: os.setgid(0)),
            "exec with a huge argv": attempt(_exec_huge),
            "open a pty": attempt(_pty),
            "controlling terminal": attempt(lambda: _read("/dev/tty", 0)),
        }
    )
    return Probed(
        tried=tried,
        dev=sorted(os.listdir("/dev")),
        uid=os.getuid(),
        capabilities=_status("CapEff") + " " + _status("CapBnd"),
        no_new_privs=_status("NoNewPrivs"),
        # a setuid program gains nothing where no_new_privs is set; nor on a mount without nosuid
        suid_mounts=[m.split()[4] for m in Path("/proc/self/mountinfo").read_text().splitlines() if "nosuid" not in m],
        descriptors=sorted(_descriptors()),
    )
