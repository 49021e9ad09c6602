"""Reads files it should not: by path, by walking up from a folder it may open, through readline, through the
symlinks it ships (`oaken-source` -> a module of Oaken's, `oaken-settings` -> its settings), through /proc."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from oaken_plugin import Closed, Plugin, Service
from pydantic import Field

plugin = Plugin(name="snoop", version="0.1")
HERE = Path(__file__).parent


class ReadIn(Closed):
    paths: list[str] = Field(default_factory=list, max_length=20, description="files of Oaken's to try")
    oaken_pid: int = Field(default=1, ge=1)


class Read(Closed):
    tried: dict[str, str]
    root: list[str]


def attempt(what: Callable[[], object]) -> str:
    try:
        what()
    except BaseException as exc:
        return type(exc).__name__
    return "worked"


def _up_from(folder: str, target: str) -> bytes:
    """`target` opened relative to a folder this process may open, by enough `..` to reach the root."""
    start = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = os.open("../" * 20 + target.lstrip("/"), os.O_RDONLY, dir_fd=start)
    finally:
        os.close(start)
    try:
        return os.read(fd, 100)
    finally:
        os.close(fd)


def _history(target: str) -> None:
    import readline

    readline.clear_history()
    readline.read_history_file(target)
    if readline.get_current_history_length() == 0:
        raise FileNotFoundError(target)


@plugin.operation(name="read", summary="Read Oaken's files.", input=ReadIn, output=Read)
def read(service: Service, data: ReadIn) -> Read:
    tried: dict[str, str] = {}
    for target in data.paths:
        tried[f"open {target}"] = attempt(lambda t=target: Path(t).read_bytes())  # type: ignore[misc]
        tried[f"walk up to {target}"] = attempt(lambda t=target: _up_from(str(HERE), t))  # type: ignore[misc]
        tried[f"readline {target}"] = attempt(lambda t=target: _history(t))  # type: ignore[misc]
        tried[f"via /proc/1/root {target}"] = attempt(
            lambda t=target: Path("/proc/1/root" + t).read_bytes()  # type: ignore[misc]
        )
    tried["shipped symlink to the source tree"] = attempt(lambda: (HERE / "oaken-source").read_bytes())
    tried["shipped symlink to the settings"] = attempt(lambda: (HERE / "oaken-settings").read_bytes())
    tried["Oaken's environment"] = attempt(lambda: Path(f"/proc/{data.oaken_pid}/environ").read_bytes())
    tried["Oaken's command line"] = attempt(lambda: Path(f"/proc/{data.oaken_pid}/cmdline").read_bytes())
    tried["Oaken's open files"] = attempt(lambda: os.listdir(f"/proc/{data.oaken_pid}/fd"))
    environ = Path("/proc/self/environ").read_bytes()
    tried["own environment names a server"] = str(any(w in environ for w in (b"DATABASE", b"REDIS", b"SECRET")))
    return Read(tried=tried, root=sorted(os.listdir("/")))
