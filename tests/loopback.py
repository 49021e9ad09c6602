"""Servers the tests and benchmarks start as child processes on loopback: a free port, waiting until the port
answers, and stopping them."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(
    port: int, proc: subprocess.Popen[Any], what: str, output: Callable[[], str], timeout: float = 30
) -> None:
    """Return once 127.0.0.1:`port` accepts connections; raise with the end of the server's output if it
    exits or the time runs out first."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not start: {output()[-2000:]}")


def stop(proc: subprocess.Popen[Any], timeout: float = 20) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
