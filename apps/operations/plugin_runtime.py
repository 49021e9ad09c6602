"""A plugin's processes and health, in this Oaken process (SPEC §17, docs/plugins.md).

A Runtime is one loaded plugin: it starts processes of the plugin, each in an operating-system sandbox
(apps.operations.sandbox) and serving one tenant (apps.operations.plugin_processes keeps them), and asks them.
A call past PLUGIN_TIMEOUT_SECONDS or PLUGIN_CPU_SECONDS ends its process; an exception is reported as the name of
a built-in exception only; more than PLUGIN_CALLS_IN_FLIGHT calls of one plugin at once are refused, not queued.
A plugin whose health check fails, or whose processes crash PLUGIN_CRASHES_MAX times within
PLUGIN_HEALTH_SECONDS, offers nothing until a later check passes; checks run in the background. The gate asks
this module, never the bridge (apps.operations.plugins), whether a plugin is healthy.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from pydantic import ValidationError

from apps.core.bounds import bounds
from apps.core.errors import OakenError
from apps.operations import sandbox
from apps.operations.plugin_processes import PluginFailure, PluginProcess, exception_name, pools

log = logging.getLogger("oaken.plugins")


def limits() -> sandbox.Limits:
    """What the kernel allows each process of a plugin: memory, threads, open files, file size, CPU time."""
    return sandbox.Limits(
        memory_mb=bounds.PLUGIN_MEMORY_MAX_MB,
        tasks=bounds.PLUGIN_THREADS_MAX,
        files=bounds.PLUGIN_FILES_MAX,
        file_mb=bounds.PLUGIN_FILE_MAX_MB,
        cpu_seconds=_life_cpu_seconds(),
    )


def _life_cpu_seconds() -> int:
    # a process lives for many calls: the kernel ends it past this; the pool retires it at half, between calls
    return 40 * bounds.PLUGIN_CPU_SECONDS


# ---------------------------------------------------------------- a plugin: its processes and health


@dataclass
class Runtime:
    """One loaded plugin: what it described of itself, its processes (by tenant) and its health."""

    name: str
    target: str  # module:attribute
    env: sandbox.Environment
    folder: Path | None = None  # its package's folder, when outside the environment
    package: str = ""
    version: str = ""
    description: dict[str, Any] = field(default_factory=dict)
    settings_schema: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _healthy: bool = False
    _checked: float = float("-inf")
    _checking: bool = False
    # when processes ended badly, by tenant ("" for the plugin's own): a tenant whose calls keep ending processes
    # (an input the plugin cannot take) loses the plugin for a while, other tenants keep it
    _crashes: dict[str, deque[float]] = field(default_factory=dict)
    _in_flight: int = 0

    def _start(self, key: tuple[str, str]) -> PluginProcess:
        """A new process of the plugin, in its sandbox, once it has imported the plugin."""
        timeout = bounds.PLUGIN_START_SECONDS
        args = ["-m", "oaken_plugin.host", self.target]
        places = []
        if self.folder is not None:
            args += ["--site", str(self.folder)]
            places.append(self.folder)
        launched = sandbox.spawn(settings.PLUGIN_SANDBOX, self.env, places, limits(), args, timeout)
        return PluginProcess(key, launched, timeout)

    def ask(
        self,
        request: dict[str, Any],
        *,
        tenant: str,
        timeout: float | None = None,
        check: Callable[[Any], object] | None = None,
    ) -> Any:
        """The plugin's answer to one request, from one of its processes serving `tenant` ("" for the plugin's
        own work); PluginFailure, or OakenError for an exception the plugin raised (a built-in name only)."""
        timeout = timeout or bounds.PLUGIN_TIMEOUT_SECONDS
        key = (self.name, tenant)
        try:
            process = pools.take(key, lambda: self._start(key))
        except (PluginFailure, sandbox.SandboxUnavailable, OSError) as failure:
            self._crashed(tenant)
            reason = "the plugin's process could not be started" if isinstance(failure, OSError) else str(failure)
            raise PluginFailure(reason) from None
        try:
            answer = process.ask(request, timeout, bounds.PLUGIN_CPU_SECONDS)
        except PluginFailure as failure:
            pools.discard(process)  # cut, gone or misbehaving: the next call gets a new process
            if failure.crashed:
                self._crashed(tenant)
            raise
        if answer.get("ok") is not True:
            pools.discard(process)  # a process that raised may hold a broken state (a MemoryError, say)
            raise OakenError("PLUGIN_FAILED", f"the plugin failed ({exception_name(answer.get('error'))})")
        if check is not None:
            try:
                check(answer.get("result"))
            except (ValidationError, TypeError, ValueError):
                pools.discard(process)
                raise PluginFailure("the plugin's answer did not match its output schema") from None
        pools.give(process, cpu_seconds_life=_life_cpu_seconds())
        return answer.get("result")

    @contextlib.contextmanager
    def calling(self) -> Iterator[None]:
        """One of at most PLUGIN_CALLS_IN_FLIGHT calls of this plugin in this Oaken process; one more is refused
        at once (a slow plugin must not hold every web thread)."""
        with self._lock:
            if self._in_flight >= bounds.PLUGIN_CALLS_IN_FLIGHT:
                raise OakenError(
                    "SERVICE_UNAVAILABLE", f"the plugin {self.name} is busy right now; try again shortly", retry_after=1
                )
            self._in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    def _crashed(self, tenant: str) -> None:
        window = bounds.PLUGIN_HEALTH_SECONDS
        now = time.monotonic()
        with self._lock:
            crashes = self._crashes.setdefault(tenant, deque())
            crashes.append(now)
            while crashes and crashes[0] < now - window:
                crashes.popleft()
            if len(crashes) >= bounds.PLUGIN_CRASHES_MAX:
                if tenant:
                    log.warning("plugin %s is unhealthy for one tenant: its processes keep ending", self.name)
                else:
                    self._healthy, self._checked = False, now
                    log.warning("plugin %s is unhealthy: its processes keep ending", self.name)

    def crashing(self, tenant: str) -> bool:
        """Whether this tenant's processes of the plugin ended badly PLUGIN_CRASHES_MAX times lately."""
        window = bounds.PLUGIN_HEALTH_SECONDS
        with self._lock:
            crashes = self._crashes.get(tenant, ())
            recent = [t for t in crashes if t >= time.monotonic() - window]
            return len(recent) >= bounds.PLUGIN_CRASHES_MAX

    def healthy(self) -> bool:
        """Its health check's last answer, never waited for: once PLUGIN_HEALTH_SECONDS have passed, the next
        check starts in the background."""
        with self._lock:
            stale = time.monotonic() - self._checked >= bounds.PLUGIN_HEALTH_SECONDS
            if stale and not self._checking:
                self._checking = True
                threading.Thread(target=self.check_health, name=f"oaken-plugin-health-{self.name}", daemon=True).start()
            return self._healthy

    def check_health(self, timeout: float | None = None) -> bool:
        """Ask the plugin's own process (no tenant's) whether it can work, within the call timeout (or `timeout`)."""
        try:
            healthy = self.ask({"kind": "health"}, tenant="", timeout=timeout) is True
        except Exception:  # whatever went wrong (a process that could not start, say), it cannot work now
            healthy = False
        with self._lock:
            if not healthy and self._healthy:
                log.warning("plugin %s is unhealthy: its health check failed", self.name)
            self._healthy, self._checked, self._checking = healthy, time.monotonic(), False
            if healthy:
                self._crashes.pop("", None)
        return healthy

    def close(self) -> None:
        pools.close(self.name)


_runtimes: dict[str, Runtime] = {}


def runtime(plugin: str) -> Runtime | None:
    return _runtimes.get(plugin)


def keep(made: Runtime) -> None:
    """The plugin as loaded now; the processes of the one it replaces, if any, are stopped."""
    previous = _runtimes.pop(made.name, None)
    if previous is not None:
        previous.close()
    _runtimes[made.name] = made


def forget(plugin: str) -> None:
    """The plugin is no longer loaded; its processes are stopped."""
    found = _runtimes.pop(plugin, None)
    if found is not None:
        found.close()


def runtimes() -> list[Runtime]:
    return sorted(_runtimes.values(), key=lambda r: r.name)


def plugin_health(plugin: str, tenant: Any = None) -> bool:
    """An unhealthy (or unknown) plugin offers nothing: to anyone, or to a tenant whose calls keep ending its
    processes."""
    found = _runtimes.get(plugin)
    if found is None or not found.healthy():
        return False
    return tenant is None or not found.crashing(str(tenant.pk))
