"""Creates files and device nodes: a database beside its module, a FIFO, a character device (the kernel log's),
files anywhere but /tmp, a file past the size limit, a /tmp filled past its size; and keeps a note in /tmp to
see whether another process (another tenant's, or a later one) finds it."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from oaken_plugin import Closed, Plugin, Service
from pydantic import Field

plugin = Plugin(name="maker", version="0.1")
HERE = Path(__file__).parent


class Empty(Closed):
    pass


class Made(Closed):
    tried: dict[str, str]


class NoteIn(Closed):
    text: str = Field(max_length=200)


class Notes(Closed):
    found: list[str]


def attempt(what: Callable[[], object]) -> str:
    try:
        what()
    except BaseException as exc:
        return type(exc).__name__
    return "worked"


def _sqlite(path: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE IF NOT EXISTS t (x)")


def _write(path: str, size: int = 1) -> None:
    with open(path, "wb") as out:
        out.write(b"x" * size)


def _fill_tmp() -> None:
    for n in range(100):  # 100 files of 1 MB each, each within the file-size limit
        _write(f"/tmp/fill-{n}", 1 << 20)


@plugin.operation(name="make", summary="Create files and device nodes.", input=Empty, output=Made)
def make(service: Service, data: Empty) -> Made:
    tried = {
        "sqlite beside the module": attempt(lambda: _sqlite(str(HERE / "plugin.sqlite3"))),
        "sqlite in /tmp": attempt(lambda: _sqlite("/tmp/plugin.sqlite3")),
        "mkfifo in /tmp": attempt(lambda: os.mkfifo("/tmp/fifo")),
        "mknod /dev/null in /tmp": attempt(lambda: os.mknod("/tmp/null", 0o666 | 0o020000, os.makedev(1, 3))),
        "mknod /dev/kmsg in /tmp": attempt(lambda: os.mknod("/tmp/kmsg", 0o600 | 0o020000, os.makedev(1, 11))),
        "write beside the module": attempt(lambda: _write(str(HERE / "made-here"))),
        "write /": attempt(lambda: _write("/made-here")),
        "write /dev/shm": attempt(lambda: _write("/dev/shm/made-here")),
        "write /dev": attempt(lambda: _write("/dev/made-here")),
        "write the Python installation": attempt(lambda: _write(os.path.join(os.__file__ + ".made-here"))),
        "write /tmp": attempt(lambda: _write("/tmp/made-here")),
        "a file of 64 MB in /tmp": attempt(lambda: _write("/tmp/big", 64 << 20)),
        "fill /tmp with 1 MB files": attempt(_fill_tmp),
        "hard link to the module": attempt(lambda: os.link(__file__, "/tmp/module-link")),
    }
    return Made(tried=tried)


@plugin.operation(name="note", summary="Leave a note in /tmp; read the notes there.", input=NoteIn, output=Notes)
def note(service: Service, data: NoteIn) -> Notes:
    folder = Path("/tmp/notes")
    found = sorted(p.read_text() for p in folder.glob("*")) if folder.is_dir() else []
    folder.mkdir(exist_ok=True)
    (folder / os.urandom(4).hex()).write_text(data.text)
    return Notes(found=found)
