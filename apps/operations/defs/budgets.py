"""Send budgets in use (SPEC §10, §18): for each API key, OAuth connection, send policy and person, the hourly
limit, what the current clock hour has used and the 24 hours before it.

The current hour is read live from Redis (one MGET for the page); when Redis does not answer, it is the figure the
roll-up (apps.outbound.rollup) last copied, marked as such with its time. Earlier hours come from the roll-up.
Persons only (ceiling never): a MEMBER sees their own keys, connections and policies and their own budget as a
person; an ADMIN sees the tenant's. A key or connection that can no longer be used is listed while it has used
something in the last 24 hours. Never a secret: a key shows its name and visible prefix only.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any, Literal

import redis
from django.db.models import F, QuerySet, Value
from pydantic import Field

from apps.agents.selectors import api_keys_by_ids, connections_by_ids, visible_api_keys, visible_connections
from apps.core.pages import cut_page, read_cursor
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Page
from apps.operations.registry import Bound, Ceiling, OpClass, operation
from apps.outbound import budget
from apps.outbound.models import BudgetUsage
from apps.outbound.rollup import window_start
from apps.outbound.selectors import budget_usage_since, send_policies_by_ids, used_lately, visible_send_policies
from apps.workspaces.selectors import members_by_user_ids, visible_members

Kind = Literal["apikey", "oauth", "person", "policy"]
HISTORY_HOURS = 24


class HourOut(Closed):
    starts_at: datetime
    used: int


class CurrentHourOut(Closed):
    starts_at: datetime
    used: int
    left: int
    live: bool = Field(
        description="true: read from Redis now; false: Redis did not answer, this is the figure "
        "last rolled up (0 when none was)"
    )
    rolled_up_at: datetime | None = Field(description="when the rolled-up figure was read; null when live")


class BudgetOut(Closed):
    kind: Kind = Field(description="apikey, oauth (a connection), person (their own sends) or policy")
    id: str
    name: str = Field(description="the key's name, the connection's client, the policy's name or the person")
    prefix: str | None = Field(description="an API key's visible prefix")
    person: str = Field(description="whose it is")
    active: bool = Field(description="false: a revoked or expired key or connection, or a deactivated person")
    limit_per_hour: int
    current_hour: CurrentHourOut
    last_24_hours: list[HourOut] = Field(description="the 24 hours before the current one that used any, oldest first")
    used_last_24_hours: int


class BudgetsOut(Closed):
    budgets: list[BudgetOut]
    live: bool = Field(description="whether Redis answered: false means the current hours are rolled-up figures")
    next_cursor: str | None


def _spines(ctx: Context, since: datetime) -> dict[str, QuerySet[Any]]:
    """Per kind, the budgets this caller may see: (kind, id) rows in id order."""
    keys = visible_api_keys(tenant=ctx.tenant, actor=ctx.caller)
    connections = visible_connections(tenant=ctx.tenant, actor=ctx.caller)
    # a key or connection that can no longer be used is listed while it has used something lately
    keys = keys.live(ctx.now) | keys.filter(used_lately(tenant=ctx.tenant, kind="apikey", since=since))
    connections = connections.live(ctx.now) | connections.filter(
        used_lately(tenant=ctx.tenant, kind="oauth", since=since)
    )
    policies = visible_send_policies(tenant=ctx.tenant, actor=ctx.caller)
    people = visible_members(tenant=ctx.tenant, actor=ctx.caller)
    return {
        "apikey": keys.annotate(kind=Value("apikey"), bid=F("pk")),
        "oauth": connections.annotate(kind=Value("oauth"), bid=F("pk")),
        "person": people.annotate(kind=Value("person"), bid=F("user_id")),
        "policy": policies.annotate(kind=Value("policy"), bid=F("pk")),
    }


def _after(kind: object, raw: object) -> tuple[str, uuid.UUID]:
    if kind not in budget.KINDS:
        raise ValueError("not a kind of budget")
    return str(kind), uuid.UUID(str(raw))


def _page(ctx: Context, since: datetime, cursor: str | None, size: int) -> list[tuple[str, uuid.UUID]]:
    """One page of (kind, id) and the row after it, ordered by kind then id, after the cursor: one UNION query."""
    after = read_cursor(cursor, 2, _after)
    parts = []
    for kind, rows in sorted(_spines(ctx, since).items()):
        if after is not None and kind < after[0]:
            continue
        if after is not None and kind == after[0]:
            rows = rows.filter(bid__gt=after[1])
        parts.append(rows.values_list("kind", "bid"))
    if not parts:
        return []
    union = parts[0].union(*parts[1:], all=True) if len(parts) > 1 else parts[0]
    return [(k, b) for k, b in union.order_by("kind", "bid")[: size + 1]]


def _describe(ctx: Context, page: list[tuple[str, uuid.UUID]]) -> dict[tuple[str, str], dict[str, Any]]:
    """What each budget of the page is, and its hourly limit."""
    ids: dict[str, list[uuid.UUID]] = defaultdict(list)
    for kind, bid in page:
        ids[kind].append(bid)
    limit = ctx.bounds.SEND_RECIPIENTS_PER_HOUR
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for key in api_keys_by_ids(tenant=ctx.tenant, ids=ids["apikey"], with_user=True):
        found["apikey", str(key.pk)] = {
            "name": key.name,
            "prefix": key.prefix,
            "person": key.user.email,
            "active": key.is_live(ctx.now),
            "limit_per_hour": limit,
        }
    for row in connections_by_ids(tenant=ctx.tenant, ids=ids["oauth"], with_user=True):
        found["oauth", str(row.pk)] = {
            "name": row.client_name,
            "prefix": None,
            "person": row.user.email,
            "active": row.is_live(ctx.now),
            "limit_per_hour": limit,
        }
    for policy in send_policies_by_ids(tenant=ctx.tenant, ids=ids["policy"]):
        found["policy", str(policy.pk)] = {
            "name": policy.name,
            "prefix": None,
            "person": policy.created_by.email,
            "active": True,
            "limit_per_hour": policy.recipients_per_hour,
        }
    members = members_by_user_ids(tenant=ctx.tenant, user_ids=ids["person"])
    for member in members:
        found["person", str(member.user_id)] = {
            "name": member.user.email,
            "prefix": None,
            "person": member.user.email,
            "active": member.user.is_active,
            "limit_per_hour": limit,
        }
    return found


def _rolled_up(ctx: Context, page: list[tuple[str, str]], since: datetime) -> dict[tuple[str, str], list[BudgetUsage]]:
    rows: dict[tuple[str, str], list[BudgetUsage]] = defaultdict(list)
    for row in budget_usage_since(tenant=ctx.tenant, budgets=page, since=since):
        rows[row.kind, row.budget_id].append(row)
    return rows


@operation(
    name="list_send_budgets",
    summary="Hourly send budgets in use (yours; an ADMIN sees the tenant's): per API key, connection, send policy "
    "and person, the limit, this hour's use (live, or rolled up when Redis is away) and the last 24 hours.",
    input=Page,
    output=BudgetsOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    bounds=(Bound("limit", "PAGE_SIZE_MAX"),),
)
def list_send_budgets(ctx: Context, data: Page) -> BudgetsOut:
    size = data.size(ctx.bounds)
    now = ctx.now.timestamp()
    current = window_start(int(now) // budget.WINDOW_SECONDS)
    since = current - timedelta(hours=HISTORY_HOURS)
    found, next_cursor = cut_page(_page(ctx, since, data.cursor, size), size, lambda row: [row[0], str(row[1])])
    page = [(kind, str(bid)) for kind, bid in found]
    names = [budget.BudgetName(str(ctx.tenant.pk), kind, bid) for kind, bid in page]
    try:
        live: list[int] | None = budget.used_now(names, now)
    except redis.RedisError:
        live = None
    described, history = _describe(ctx, found), _rolled_up(ctx, page, since)
    budgets = []
    for i, (kind, bid) in enumerate(page):
        what = described.get((kind, bid))
        if what is None:  # gone between the two queries
            continue
        rows = history.get((kind, bid), [])
        this_hour = next((r for r in rows if r.window_start == current), None)
        used = live[i] if live is not None else (this_hour.used if this_hour else 0)
        earlier = sorted((r for r in rows if r.window_start < current), key=lambda r: r.window_start)
        budgets.append(
            BudgetOut(
                kind=kind,  # type: ignore[arg-type]
                id=bid,
                **what,
                current_hour=CurrentHourOut(
                    starts_at=current,
                    used=used,
                    left=max(0, what["limit_per_hour"] - used),
                    live=live is not None,
                    rolled_up_at=this_hour.rolled_up_at if live is None and this_hour else None,
                ),
                last_24_hours=[HourOut(starts_at=r.window_start, used=r.used) for r in earlier],
                used_last_24_hours=sum(r.used for r in earlier),
            )
        )
    return BudgetsOut(budgets=budgets, live=live is not None, next_cursor=next_cursor)
