"""The processes plugins run in, and their pools: one tenant's calls per process (SPEC §17, docs/plugins.md).

A process serves the calls of one plugin for one tenant (or, for describing the plugin and checking its
health, for no tenant) and never another's afterwards, so nothing a plugin keeps in memory reaches another
tenant. Every request carries a random id; an answer with another id, a second line, or bytes that are not one
JSON answer end the process and fail the call, so nothing a process writes out of turn reaches a later caller.
A process between calls is stopped (SIGSTOP), and one that has more threads after a call than when it was ready is
not kept at all: a thread left running could write out of turn whenever the process runs again, and whether it
does before or after the next answer is the scheduler's choice. Nor is one kept that does not answer a fence
next (a line it was still to write for the call would otherwise meet the next caller). The CPU time of each call
is measured from outside; a call past PLUGIN_CPU_SECONDS, PLUGIN_TIMEOUT_SECONDS or PLUGIN_ANSWER_MAX_BYTES
ends its process. An Oaken process keeps at most PLUGIN_PROCESSES_MAX of them, PLUGIN_POOL_SIZE idle ones per
plugin and tenant, and ends those idle for PLUGIN_IDLE_SECONDS.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import select
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from apps.core.bounds import bounds
from apps.core.errors import OakenError
from apps.operations.sandbox import Sandboxed

log = logging.getLogger("oaken.plugins")

Key = tuple[str, str]  # (plugin, tenant id; "" for the plugin's own work: describing, health)
_TICKS = os.sysconf("SC_CLK_TCK")
_ANSWER_KEYS = frozenset({"id", "ok", "result", "error"})
# how long a process kept for later calls may take to answer the fence after a call (past it, it is not kept)
FENCE_SECONDS = 1.0


class PluginFailure(Exception):
    """A plugin's process did not answer as it should (the reason is fixed text, never the plugin's)."""

    def __init__(self, reason: str, *, crashed: bool = False) -> None:
        super().__init__(reason)
        self.crashed = crashed


class PluginProcess:
    """One sandboxed process of a plugin, spoken to by JSON lines."""

    def __init__(self, key: Key, sandboxed: Sandboxed, timeout: float) -> None:
        self.key = key
        self.sandboxed = sandboxed
        self.idle_since = time.monotonic()
        self._buffer = b""
        try:
            ready = self._answer("ready", timeout, cpu_seconds=None)
        except PluginFailure:
            self.kill()
            raise
        if ready.get("ok") is not True:
            self.kill()
            raise PluginFailure(f"the plugin failed to load ({exception_name(ready.get('error'))})")
        self.threads_when_ready = self.threads()

    @property
    def pid(self) -> int:
        return self.sandboxed.pid

    def ask(self, request: dict[str, Any], timeout: float, cpu_seconds: float) -> dict[str, Any]:
        """The answer to `request` (an id is added); PluginFailure when it is late, wrong, too large or too
        costly. The caller ends the process after a failure."""
        call_id = secrets.token_hex(16)
        deadline = time.monotonic() + timeout
        self._send(json.dumps({**request, "id": call_id}).encode() + b"\n", deadline)
        return self._answer(call_id, timeout, cpu_seconds, deadline=deadline)

    def _send(self, data: bytes, deadline: float) -> None:
        """Write the request, never waiting past the deadline on a process that does not read it."""
        stdin = self.sandboxed.process.stdin
        assert stdin is not None
        fd = stdin.fileno()
        view = memoryview(data)
        os.set_blocking(fd, False)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PluginFailure("the plugin did not read its request in time")
            _, writable, _ = select.select([], [fd], [], left)
            if not writable:
                continue
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                continue
            except OSError:
                raise PluginFailure("the plugin's process ended", crashed=True) from None

    def _answer(
        self, call_id: str, timeout: float, cpu_seconds: float | None, *, deadline: float | None = None
    ) -> dict[str, Any]:
        """The one line that answers `call_id`, by the deadline (`timeout` seconds from now unless given) and, for
        a call, within `cpu_seconds` of CPU."""
        stdout = self.sandboxed.process.stdout
        assert stdout is not None
        fd = stdout.fileno()
        most = bounds.PLUGIN_ANSWER_MAX_BYTES
        deadline = deadline or time.monotonic() + timeout
        spent = self.cpu() if cpu_seconds is not None else 0.0
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PluginFailure(f"the plugin did not answer within {timeout:g} s")
            readable, _, _ = select.select([fd], [], [], min(left, 0.25))
            if cpu_seconds is not None and self.cpu() - spent > cpu_seconds:
                raise PluginFailure(f"the plugin used more than {cpu_seconds:g} s of CPU time in one call")
            if not readable:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise PluginFailure("the plugin's process ended", crashed=True)
            self._buffer += chunk
            if len(self._buffer) > most:
                raise PluginFailure("the plugin's answer was too large")
        line, _, self._buffer = self._buffer.partition(b"\n")
        if self._buffer:
            raise PluginFailure("the plugin's process wrote more than its answer", crashed=True)
        try:
            answer = json.loads(line)
        except (ValueError, RecursionError):  # nested deeper than Python's reader goes: not an answer either
            raise PluginFailure("the plugin's answer was not JSON", crashed=True) from None
        if (
            not isinstance(answer, dict)
            or not set(answer) <= _ANSWER_KEYS
            or answer.get("id") != call_id
            or not isinstance(answer.get("ok"), bool)
        ):
            raise PluginFailure("the plugin's answer was not the answer to its request", crashed=True)
        return answer

    def fenced(self, timeout: float) -> bool:
        """Whether it has finished its last turn: a fence asked now is the next thing it answers. A line it was
        still to write for the call before (its own answer after a forged one, say) comes first and fails this,
        rather than the next call."""
        try:
            return self.ask({"kind": "fence"}, timeout, cpu_seconds=timeout).get("result") == "fence"
        except PluginFailure:
            return False

    def cpu(self) -> float:
        """CPU seconds its interpreter has used (every thread's), read from outside."""
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            return 0.0
        return (int(fields[11]) + int(fields[12])) / _TICKS

    def threads(self) -> int:
        """How many threads it has now, read from outside (0 once it is gone)."""
        try:
            with open(f"/proc/{self.pid}/status", "rb") as status:
                for line in status:
                    if line.startswith(b"Threads:"):
                        return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            pass
        return 0

    def stale(self) -> bool:
        """Whether it wrote something since its last answer (a late line: the process is not to be used)."""
        stdout = self.sandboxed.process.stdout
        if self._buffer or stdout is None:
            return True
        readable, _, _ = select.select([stdout.fileno()], [], [], 0)
        return bool(readable)

    @property
    def alive(self) -> bool:
        return self.sandboxed.process.poll() is None

    def freeze(self) -> None:
        self.sandboxed.signal(signal.SIGSTOP)
        self.idle_since = time.monotonic()

    def thaw(self) -> None:
        self.sandboxed.signal(signal.SIGCONT)

    def kill(self) -> None:
        self.sandboxed.end()


def exception_name(value: object) -> str:
    """What a plugin says it raised, as Oaken reports it: a built-in exception's name, else `Exception` (a
    name of the plugin's own choosing could spell out mail)."""
    text = str(value)
    return text if text in BUILTIN_EXCEPTIONS else "Exception"


BUILTIN_EXCEPTIONS = frozenset(
    name
    for name, value in vars(__import__("builtins")).items()
    if isinstance(value, type) and issubclass(value, BaseException)
)


class Pools:
    """The plugin processes of this Oaken process, by plugin and tenant."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[Key, list[PluginProcess]] = {}
        self._count = 0  # processes alive or being started, idle or busy
        self._owner = os.getpid()
        self._reaper: threading.Thread | None = None

    def _forked(self) -> None:
        # a forked Oaken process (Celery's prefork pool): the processes it inherited are its parent's to talk to
        if self._owner != os.getpid():
            self._idle, self._count, self._owner, self._reaper = {}, 0, os.getpid(), None
            self._lock = threading.Lock()

    def take(self, key: Key, start: Callable[[], PluginProcess]) -> PluginProcess:
        """An idle process of `key`, else a new one (SERVICE_UNAVAILABLE when this Oaken process holds as many
        as it may and none is idle)."""
        self._forked()
        spare: list[PluginProcess] = []
        with self._lock:
            found = None
            idle = self._idle.get(key, [])
            while idle:
                candidate = idle.pop()
                if candidate.alive and not candidate.stale():
                    found = candidate
                    break
                spare.append(candidate)
                self._count -= 1
            if found is None:
                if self._count >= bounds.PLUGIN_PROCESSES_MAX:
                    oldest = self._oldest_idle()
                    if oldest is None:
                        raise OakenError(
                            "SERVICE_UNAVAILABLE", "the plugins are busy right now; try again shortly", retry_after=1
                        )
                    spare.append(oldest)
                    self._count -= 1
                self._count += 1
        for process in spare:
            process.kill()
        if found is not None:
            found.thaw()
            return found
        try:
            return start()
        except BaseException:
            with self._lock:
                self._count -= 1
            raise

    def _oldest_idle(self) -> PluginProcess | None:
        candidates = [(p.idle_since, key, p) for key, idle in self._idle.items() for p in idle]
        if not candidates:
            return None
        _, key, oldest = min(candidates, key=lambda c: c[0])
        self._idle[key].remove(oldest)
        return oldest

    def give(self, process: PluginProcess, *, cpu_seconds_life: float) -> None:
        """A process back after a good answer: kept, stopped, while its key has room, it has CPU time left and it
        left no thread running that it did not have when it was ready, and it answers a fence next (it has written
        everything it was to write for the call)."""
        self._forked()
        if (
            process.alive
            and process.cpu() < cpu_seconds_life / 2
            and 0 < process.threads() <= process.threads_when_ready
            and process.fenced(FENCE_SECONDS)
        ):
            process.freeze()
            with self._lock:
                idle = self._idle.setdefault(process.key, [])
                if len(idle) < bounds.PLUGIN_POOL_SIZE:
                    idle.append(process)
                    self._start_reaper()
                    return
        self.discard(process)

    def discard(self, process: PluginProcess) -> None:
        process.kill()
        with self._lock:
            self._count -= 1

    def close(self, plugin: str | None = None) -> None:
        """End the idle processes of a plugin (every plugin's when None)."""
        self._forked()
        with self._lock:
            keys = [key for key in self._idle if plugin is None or key[0] == plugin]
            ended = [p for key in keys for p in self._idle.pop(key)]
            self._count -= len(ended)
        for process in ended:
            process.kill()

    def idle(self, plugin: str | None = None) -> list[PluginProcess]:
        with self._lock:
            return [p for key, idle in self._idle.items() if plugin is None or key[0] == plugin for p in idle]

    def reap(self) -> None:
        """End the processes idle for longer than PLUGIN_IDLE_SECONDS."""
        limit = time.monotonic() - bounds.PLUGIN_IDLE_SECONDS
        with self._lock:
            ended = []
            for idle in self._idle.values():
                ended += [p for p in idle if p.idle_since < limit]
                idle[:] = [p for p in idle if p.idle_since >= limit]
            self._count -= len(ended)
        for process in ended:
            process.kill()

    def _start_reaper(self) -> None:
        if self._reaper is None or not self._reaper.is_alive():
            self._reaper = threading.Thread(target=self._reap_forever, name="oaken-plugin-reaper", daemon=True)
            self._reaper.start()

    def _reap_forever(self) -> None:
        owner = self._owner
        while owner == os.getpid() == self._owner:
            time.sleep(min(5.0, bounds.PLUGIN_IDLE_SECONDS / 2))
            try:
                self.reap()
            except Exception:  # the reaper must outlive a bad moment; the next round tries again
                log.exception("reaping idle plugin processes failed")


pools = Pools()
