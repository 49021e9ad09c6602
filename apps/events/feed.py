"""Reading the event feed and keeping it to its retention (apps.events.models says how it is written).

A page is read from a cursor (the `seq` of the last event the reader has): the events after it, in order. A cursor
below what retention removed has missed events: it is refused (CURSOR_EXPIRED, naming the oldest point still
available), never answered as if nothing were missing.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Q

from apps.audit.models import ChainHead
from apps.core.errors import OakenError
from apps.events.models import Event
from apps.workspaces.models import Tenant

# (what the feed reports is listed once, as list_events' EventType: the triggers of migrations 0002 to 0004 write
# them)

# families only persons read, and no webhook carries: webhooks are never offered to agents (SPEC §15), nor are their
# events; nor are credentials (a key's or a connection's deadline, the send budget a credential spent): what an agent
# could learn of another credential of its person's, or of another person's, is none of its business, and its own
# spent budget it was told already, in the refusal (RATE_LIMITED, with retry_after)
PERSONS_ONLY = ("webhook.", "budget.", "connection.")


@dataclass(frozen=True)
class Page:
    events: list[Event]
    # the cursor to read on from: the last event's seq, or the cursor given when nothing followed it
    cursor: int
    # the tenant's newest number now (a reader at it has everything so far)
    latest: int


def head(tenant: Tenant) -> tuple[int, int]:
    """(the tenant's newest event number, the number up to which retention removed events)."""
    row = ChainHead.objects.filter(tenant=tenant).values_list("event_seq", "events_pruned").first()
    return (row[0], row[1]) if row is not None else (0, 0)


def read(
    tenant: Tenant,
    *,
    after: int | None,
    workspace_ids: Collection[Any] | None,
    account_id: Any | None,
    types: Collection[str],
    limit: int,
    hidden: Collection[str] = (),
) -> Page:
    """Up to `limit` events after the cursor (None: from the oldest retained), of these workspaces (None: every one,
    and the tenant's own events too), this account, these types (empty: all; 'outbound.' covers its family), none
    of the `hidden` families."""
    latest, pruned = head(tenant)
    if after is not None and after < pruned:
        raise OakenError(
            "CURSOR_EXPIRED",
            f"events after this cursor were removed by retention: read on from {pruned} (list_events after={pruned})",
            field="after",
        )
    start = pruned if after is None else after
    rows = Event.objects.for_tenant(tenant).filter(seq__gt=start)
    if workspace_ids is not None:
        rows = rows.filter(workspace_id__in=list(workspace_ids))
    if account_id is not None:
        rows = rows.filter(account_id=account_id)
    if types:
        wanted = Q()
        for kind in types:
            wanted |= Q(type__startswith=kind) if kind.endswith(".") else Q(type=kind)
        rows = rows.filter(wanted)
    for family in hidden:
        rows = rows.exclude(type__startswith=family)
    found = list(rows.order_by("seq")[:limit])
    # a filtered page moves the cursor past what it skipped, up to the newest number read
    cursor = found[-1].seq if found else start
    if len(found) < limit:
        cursor = max(cursor, latest)
    return Page(found, cursor, latest)


def prune(*, before: datetime) -> int:
    """Remove events older than `before`, every tenant, and move each tenant's retention point; how many."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""WITH gone AS (
                    DELETE FROM {Event._meta.db_table} WHERE at < %s RETURNING tenant_id, seq
                ), highest AS (SELECT tenant_id, max(seq) AS seq, count(*) AS n FROM gone GROUP BY tenant_id)
                UPDATE audit_chainhead h SET events_pruned = greatest(h.events_pruned, highest.seq)
                FROM highest WHERE h.tenant_id = highest.tenant_id
                RETURNING highest.n""",  # noqa: S608 (the table's own name)
            [before],
        )
        return sum(row[0] for row in cursor.fetchall())
