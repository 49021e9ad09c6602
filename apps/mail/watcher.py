"""The IMAP IDLE watcher (`oaken watch-mail`): new mail in seconds, not at the next poll.

One asyncio process watches many accounts: per account it holds, one connection EXAMINEs INBOX and waits in
IDLE (apps.mail.idle), issued again every WATCH_REIDLE_SECONDS (servers may drop an idle connection after 30
minutes). When the server says INBOX changed (EXISTS, RECENT, EXPUNGE, FETCH) it asks for a sync of that
account as the product does anywhere else: the `mail.sync_account` task, at most one waiting per account. A
connection that fails is opened again after a doubling wait with jitter, capped at WATCH_BACKOFF_MAX_SECONDS;
a server without IDLE is left to the poll (looked at again hourly). The poll stays the safety net.

Several watchers (several machines) share the accounts through leases in Redis: a key per account naming its
watcher, set only where none is (SET NX) and renewed every third of WATCH_LEASE_TTL_SECONDS, so it lapses
that long after its watcher died. A watcher connects only while it holds the account's lease and drops the
connection as soon as a renewal says the lease is gone, or when it has not renewed for longer than the TTL
(Redis away): never two watchers, never two connections on one account. Every WATCH_SCAN_SECONDS it looks at
the accounts (new ones, removed ones) and at the live watchers, and holds its fair share (accounts / live
watchers, rounded up, at most WATCH_ACCOUNTS_MAX), releasing any above it; accounts that stay free across two
looks (the others are full) it takes too, up to WATCH_ACCOUNTS_MAX.

Why Redis and not PostgreSQL: a key's TTL is exactly a lease that lapses when its holder stops renewing,
reckoned on one clock (Redis's); renewing a thousand leases every ten seconds is one round trip, with no row
churn (dead tuples, vacuum) in the database that holds the mail; and Redis is already every process's.

Credentials are read and decrypted in this process's memory only (watch_login), never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import close_old_connections

from apps.core.bounds import bounds
from apps.mail.idle import IdleConnection, IdleError, ImapLogin, NoIdleError
from apps.mail.models import AccountKind, MailAccount, OAuthState
from apps.mail.oauth.tokens import login_config
from apps.mail.reasons import MailServerError

log = logging.getLogger("oaken.mail.watcher")

PREFIX = "oaken:watch:"
NO_IDLE_RECHECK_SECONDS = 3600
_RENEW = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


def lease_key(account_id: str) -> str:
    return f"{PREFIX}lease:{account_id}"


def pending_key(account_id: str) -> str:
    """Set while a sync the watcher asked for waits to start (the task clears it): at most one waits."""
    return f"{PREFIX}pending:{account_id}"


def _alive_key(watcher_id: str) -> str:
    return f"{PREFIX}alive:{watcher_id}"


def watchable_accounts() -> list[str]:
    """Every account a watcher should watch, all tenants (system work). An account state that stops syncing
    (a mailbox that needs reconnecting) leaves the list here."""
    accounts = MailAccount.objects.unscoped().filter(kind=AccountKind.IMAP)
    accounts = accounts.exclude(oauth_state=OAuthState.NEEDS_RECONNECT)
    return [str(pk) for pk in accounts.values_list("pk", flat=True)]


def watch_login(account_id: str) -> ImapLogin | None:
    """The one place a watcher obtains an account's IMAP login (decrypted here, in memory; None when the account
    is gone). An OAuth mailbox gets a fresh access token here."""
    from apps.mail.imap import pinned_address

    close_old_connections()
    account = MailAccount.objects.unscoped().filter(pk=account_id, kind=AccountKind.IMAP).first()
    if account is None:
        return None
    try:
        # the sync's own login settings: for an OAuth mailbox a fresh access token (refreshed under the account's
        # lock when it expires soon) and the provider's SASL mechanism
        imap = login_config(account, "imap")
    except MailServerError:
        return None  # needs reconnecting, or unreadable: the next scan looks again, the poll reports it
    address = pinned_address(imap["host"], int(imap["port"]), "imap.host")
    return ImapLogin(
        imap["host"],
        int(imap["port"]),
        imap["security"],
        imap["username"],
        imap.get("password", ""),
        bearer=imap.get("bearer", ""),
        mechanism=imap.get("mechanism", ""),
        address=address,
    )


def request_sync(account_id: str) -> None:
    """Queue the account's sync as the product does (the task clears the pending mark when it starts), by the
    task's name as services.queue_sync does: the task module imports this one (pending_key), never the reverse."""
    from celery import current_app

    from apps.mail.services import SYNC_ACCOUNT_TASK

    current_app.tasks[SYNC_ACCOUNT_TASK].apply_async(kwargs={"account_id": account_id, "watched": True})


def backoff(failures: int, cap: float) -> float:
    """Capped exponential backoff with full jitter: 1 s, 2 s, 4 s ... up to `cap`, each drawn from half to all."""
    ceiling = min(cap, 2.0 ** max(failures - 1, 0))
    return random.uniform(ceiling / 2, ceiling)  # noqa: S311 (jitter, not a secret)


@dataclass
class Held:
    task: asyncio.Task[None]
    connected: bool = False
    idle: bool = True


@dataclass
class Watcher:
    watcher_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}")
    redis: Any = None
    login: Callable[[str], ImapLogin | None] = watch_login
    accounts: Callable[[], list[str]] = watchable_accounts
    ask_sync: Callable[[str], None] = request_sync
    held: dict[str, Held] = field(default_factory=dict)
    _free_before: set[str] = field(default_factory=set)
    _renewed_at: float = 0.0

    def __post_init__(self) -> None:
        if self.redis is None:
            import redis.asyncio as aioredis
            from django.conf import settings

            self.redis = aioredis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5)
        self._renew = self.redis.register_script(_RENEW)
        self._release = self.redis.register_script(_RELEASE)

    @property
    def ttl_ms(self) -> int:
        return bounds.WATCH_LEASE_TTL_SECONDS * 1000

    # ---------------------------------------------------------------- the process

    async def run(self, stop: asyncio.Event) -> None:
        log.info("watcher %s started", self.watcher_id)
        self._renewed_at = time.monotonic()
        await self.redis.set(_alive_key(self.watcher_id), 1, px=self.ttl_ms)
        renewing = asyncio.create_task(self._renew_loop(stop))
        try:
            while not stop.is_set():
                try:
                    await self.scan()
                except Exception as exc:  # Redis or the database away: look again at the next scan
                    log.warning("watcher %s: a scan failed (%s)", self.watcher_id, type(exc).__name__)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), bounds.WATCH_SCAN_SECONDS)
        finally:
            renewing.cancel()
            await self.release_all()
            log.info("watcher %s stopped", self.watcher_id)

    async def release_all(self) -> None:
        for account_id in list(self.held):
            await self._drop(account_id, release=True)
        with contextlib.suppress(Exception):  # stopping; the key lapses by itself
            await self.redis.delete(_alive_key(self.watcher_id))

    async def _live_watchers(self) -> int:
        count = 0
        async for _ in self.redis.scan_iter(match=f"{PREFIX}alive:*", count=1000):
            count += 1
        return max(count, 1)

    async def scan(self) -> None:
        """Follow the accounts (added, removed) and hold this watcher's share of them."""
        accounts = await asyncio.to_thread(self.accounts)
        present = set(accounts)
        for account_id in [a for a in self.held if a not in present]:
            await self._drop(account_id, release=True, why="removed")
        most = bounds.WATCH_ACCOUNTS_MAX
        share = min(most, math.ceil(len(accounts) / await self._live_watchers()))
        if len(self.held) > share:  # another watcher came: let go of what is above the share, it takes them
            for account_id in random.sample(sorted(self.held), len(self.held) - share):
                await self._drop(account_id, release=True, why="shared")
        if not accounts:
            return
        holders = await self.redis.mget([lease_key(a) for a in accounts])
        free = [a for a, holder in zip(accounts, holders, strict=True) if holder is None]
        random.shuffle(free)
        # free accounts up to the share; beyond it only those free at the last look too (the others are full)
        wanted = free[: max(share - len(self.held), 0)]
        spare = [a for a in free[len(wanted) :] if a in self._free_before]
        wanted += spare[: max(most - len(self.held) - len(wanted), 0)]
        self._free_before = set(free) - set(wanted)
        for account_id in wanted:
            if await self.redis.set(lease_key(account_id), self.watcher_id, nx=True, px=self.ttl_ms):
                log.info("watcher %s took account %s", self.watcher_id, account_id)
                self.held[account_id] = Held(asyncio.create_task(self._watch(account_id)))

    async def _renew_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(max(bounds.WATCH_LEASE_TTL_SECONDS / 3, 0.5))
            try:
                await self.renew()
            except Exception:
                # Redis away: past the TTL since the last renewal another watcher may hold them; let go
                if time.monotonic() - self._renewed_at > bounds.WATCH_LEASE_TTL_SECONDS * 2 / 3:
                    log.warning("watcher %s cannot renew its leases: letting its accounts go", self.watcher_id)
                    for account_id in list(self.held):
                        await self._drop(account_id, release=False, why="unrenewed")

    async def renew(self) -> None:
        started = time.monotonic()
        ids = list(self.held)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(_alive_key(self.watcher_id), 1, px=self.ttl_ms)
            for account_id in ids:
                await self._renew(keys=[lease_key(account_id)], args=[self.watcher_id, self.ttl_ms], client=pipe)
            answers = await pipe.execute()
        self._renewed_at = started
        for account_id, kept in zip(ids, answers[1:], strict=True):
            if not kept and account_id in self.held:
                await self._drop(account_id, release=False, why="lost")

    async def _drop(self, account_id: str, *, release: bool, why: str = "stopping") -> None:
        held = self.held.pop(account_id, None)
        if held is not None:
            held.task.cancel()
            with contextlib.suppress(BaseException):  # cancelled, or its error already logged
                await held.task
        if release:
            with contextlib.suppress(Exception):  # the lease lapses by itself
                await self._release(keys=[lease_key(account_id)], args=[self.watcher_id])
        log.info("watcher %s let go of account %s (%s)", self.watcher_id, account_id, why)

    # ---------------------------------------------------------------- one account

    async def changed(self, account_id: str) -> None:
        """The server said INBOX changed: a sync, unless one this watcher asked for still waits to start."""
        try:
            if await self.redis.set(pending_key(account_id), self.watcher_id, nx=True, ex=60):
                await asyncio.to_thread(self.ask_sync, account_id)
        except Exception:
            log.warning("watcher %s could not ask for a sync of account %s", self.watcher_id, account_id)

    async def _watch(self, account_id: str) -> None:
        failures = 0
        asked: set[asyncio.Task[None]] = set()

        def changed() -> None:
            task = asyncio.create_task(self.changed(account_id))
            asked.add(task)
            task.add_done_callback(asked.discard)

        while True:
            conn: IdleConnection | None = None
            try:
                login = await asyncio.to_thread(self.login, account_id)
                if login is None:
                    return  # gone: the next scan lets the lease go
                conn = await IdleConnection.open(login, float(bounds.MAIL_SERVER_TIMEOUT_SECONDS))
                del login
                await conn.examine_inbox()
                if account_id in self.held:
                    self.held[account_id].connected = True
                log.info("watcher %s is watching account %s", self.watcher_id, account_id)
                if failures:
                    changed()  # mail may have come while the connection was down
                failures = 0
                while True:
                    await conn.idle(bounds.WATCH_REIDLE_SECONDS, changed)
            except asyncio.CancelledError:
                raise
            except NoIdleError:
                if account_id in self.held:
                    self.held[account_id].idle = False
                log.info("account %s: its server offers no IDLE; left to polling", account_id)
                wait = float(NO_IDLE_RECHECK_SECONDS)
            except (IdleError, OSError, ConnectionError, TimeoutError, EOFError) as exc:
                failures += 1
                wait = backoff(failures, bounds.WATCH_BACKOFF_MAX_SECONDS)
                reason = exc.reason if isinstance(exc, IdleError) else "connection_failed"
                log.info("account %s: watching failed (%s); again in %.0f s", account_id, reason, wait)
            except Exception as exc:  # the database away, a refused host: never the exception's text (credentials)
                failures += 1
                wait = backoff(failures, bounds.WATCH_BACKOFF_MAX_SECONDS)
                reason = getattr(exc, "reason", type(exc).__name__)
                log.warning("account %s: watching failed (%s); again in %.0f s", account_id, reason, wait)
            finally:
                if conn is not None:
                    conn.close()
                if account_id in self.held:
                    self.held[account_id].connected = False
            await asyncio.sleep(wait)
