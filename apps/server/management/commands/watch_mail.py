"""`oaken watch-mail`: the IMAP IDLE watcher (apps.mail.watcher), until stopped; `oaken serve` runs one."""

from __future__ import annotations

import asyncio
import logging
import resource
import signal
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from apps.mail.watcher import Watcher


def _raise_open_files_limit() -> None:
    """One socket per account watched: the soft limit of open files up to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 1 << 20, hard))


class Command(BaseCommand):
    help = "Watch connected mailboxes' inboxes with IMAP IDLE and ask for a sync when mail arrives."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--id", default=None, help="this watcher's name in the leases (default: host:pid:random)")

    def handle(self, *args: Any, **options: Any) -> None:
        if not logging.getLogger().handlers:
            logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        _raise_open_files_limit()
        asyncio.run(self._run(options["id"]))

    async def _run(self, watcher_id: str | None) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        watcher = Watcher(watcher_id) if watcher_id else Watcher()
        await watcher.run(stop)
