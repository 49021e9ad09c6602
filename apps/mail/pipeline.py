"""Getting batches of raw mail to the store quickly: parsed in a pool of processes (or inline), read ahead in a
thread, with the long-lived objects kept out of garbage collection meanwhile. Imports and IMAP sync share it."""

from __future__ import annotations

import gc
import multiprocessing
import os
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar

from apps.core.bounds import bounds
from apps.mail.rows import MessageRow, row_or_reason
from apps.mail.sources import RawItem

_PARSE_BATCH_TIMEOUT = 600
_T = TypeVar("_T")


@contextmanager
def parse_pool(max_bytes: int) -> Iterator[Callable[[list[RawItem]], Callable[[], list[MessageRow | str]]]]:
    """Parsing of batches into rows, started now and collected later, so the next batch parses while one is stored.

    Parsing costs more than storing, so it runs in a pool of processes where it can: not inside a
    daemonic process (a Celery prefork child), which may not have children; there it runs inline.
    """
    parse = partial(row_or_reason, max_bytes=max_bytes, attachment_text_max=bounds.ATTACHMENT_TEXT_MAX_CHARS)
    workers = min(os.cpu_count() or 1, 4)
    if workers < 2 or multiprocessing.current_process().daemon:

        def start_inline(batch: list[RawItem]) -> Callable[[], list[MessageRow | str]]:
            results = [parse(item.data) for item in batch]
            return lambda: results

        yield start_inline
        return
    with multiprocessing.get_context("forkserver").Pool(workers) as pool:

        def start(batch: list[RawItem]) -> Callable[[], list[MessageRow | str]]:
            pending = pool.map_async(
                parse, [item.data for item in batch], chunksize=max(1, len(batch) // (4 * workers))
            )
            # a batch that takes this long means a stuck worker: fail the import rather than hang
            return partial(pending.get, timeout=_PARSE_BATCH_TIMEOUT)

        yield start


def parse_batch(items: list[RawItem]) -> list[MessageRow | str]:
    """Each item parsed into its row, or the reason it cannot be stored."""
    max_bytes, text_max = bounds.IMPORT_MAX_MESSAGE_BYTES, bounds.ATTACHMENT_TEXT_MAX_CHARS
    return [row_or_reason(item.data, max_bytes, text_max) for item in items]


@contextmanager
def long_lived_frozen() -> Iterator[None]:
    """Leave the objects that exist now (Django, the modules, the caches) out of garbage collection meanwhile.

    A sync or an import makes millions of short-lived objects, enough for full collections, and each one
    walks every long-lived object again: a third of a second of a 10,000-message sync. Nothing is frozen
    when something else already froze objects (a server keeping pages shared after fork manages that)."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextmanager
def read_ahead(produce: Iterator[_T], depth: int = 1) -> Iterator[Iterator[_T]]:
    """`produce` run in a thread, up to `depth` items ahead of the caller taking them; its errors are raised
    in the caller. Reading mail and parsing it (Python) then overlap with the caller's waits on the database.

    When the context ends, the thread stops after the item it is making, and is waited for."""
    ready: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                ready.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for item in produce:
                if not put((True, item)):
                    return
        except BaseException as exc:
            put((False, exc))
            return
        put((False, None))

    def take() -> Iterator[_T]:
        while True:
            fine, value = ready.get()
            if fine:
                yield value
            elif value is None:
                return
            else:
                raise value

    thread = threading.Thread(target=run, name="oaken-read-ahead", daemon=True)
    thread.start()
    try:
        yield take()
    finally:
        stop.set()
        thread.join()
