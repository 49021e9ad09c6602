"""The audit log for persons (SPEC §12): read, filtered and in words, verified, exported. Never offered to agents.

Who sees what: an ADMIN reads, verifies and exports the tenant's whole chain; a MEMBER reads the events of their
own calls and of their own agents' (their keys and connections), never anyone else's. A row names the people and
credentials it speaks of (resolved here, at read time) but never mail: a message is "a message", not its subject.
"""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import datetime
from typing import Annotated, Literal

from django.db.models import Q
from pydantic import AwareDatetime, Field, StringConstraints

from apps.agents.selectors import api_keys_by_ids, connections_by_ids
from apps.audit.log import committed_chain_status, exported_line, head_seq
from apps.audit.models import AuditEvent
from apps.audit.selectors import (
    event_by_hash,
    event_by_id,
    event_by_seq,
    events_between,
    events_page,
    reads_by_person_day,
    visible_seqs,
)
from apps.core.changes import REVERSES
from apps.core.errors import OakenError
from apps.core.kinds import Role
from apps.core.pages import cut_page, encode_cursor, read_cursor
from apps.mail.selectors import names_by_ids as mail_names
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Empty, Id, Page
from apps.operations.registry import Bound, Ceiling, OpClass, operation, registry
from apps.outbound.selectors import names_by_ids as outbound_names
from apps.rules.selectors import rules_by_ids
from apps.workspaces.selectors import members_by_user_ids
from apps.workspaces.selectors import names_by_ids as workspace_names

# ---------------------------------------------------------------- list_audit_events


class AuditListIn(Page):
    operation: str | None = Field(default=None, max_length=200, description="only this operation's events")
    principal: Literal["person", "agent", "internal"] | None = None
    person_id: Id | None = Field(default=None, description="only this person's calls and their agents'")
    credential_kind: Literal["apikey", "oauth"] | None = Field(default=None, description="with credential_id")
    credential_id: Id | None = Field(default=None, description="only this API key's or connection's calls")
    outcome: str | None = Field(
        default=None, max_length=50, description="ok, refused (every outcome but ok), or one error code"
    )
    since: AwareDatetime | None = Field(default=None, description="events at or after this time")
    until: AwareDatetime | None = Field(default=None, description="events before this time")
    console_reads: Literal["show", "fold"] = Field(
        default="show",
        description="show: every event; fold: a person's own successful reads in the console (what its pages load "
        "and refresh) are left out of `events` and counted in `folded_reads`, one line per person and day. "
        "Still recorded and verified; agents' reads, refusals and changes always show",
    )


class TargetOut(Closed):
    id: str
    kind: str = Field(description="what the id is (message, account, API key, ...); '' when it is no row's id")
    name: str | None = Field(description="its name where it has one that is not mail text")
    before: object
    after: object


class AuditEventOut(Closed):
    seq: int
    created_at: datetime
    principal: str
    person_id: str | None
    person: str | None = Field(description="the person's e-mail address ('a former member' once they left)")
    credential_kind: str
    credential_id: str
    credential: str | None = Field(description="the API key's or connection's name")
    door: str
    operation: str
    outcome: str
    targets: list[TargetOut]
    description: str = Field(description="the event in words")
    input_digest: str
    hash: str


class FoldedReadsOut(Closed):
    person_id: str | None
    person: str | None = Field(description="the person's e-mail address ('a former member' once they left)")
    count: int
    first_seq: int
    last_seq: int
    first_at: datetime
    last_at: datetime
    areas: list[str] = Field(description="what the reads looked at, in words (mail, assistants, the audit log, ...)")
    description: str = Field(description="the line in words, without its times")


class AuditListOut(Closed):
    events: list[AuditEventOut]
    next_cursor: str | None
    folded_reads: list[FoldedReadsOut] = Field(
        description="with console_reads=fold: the reads left out between this page's events (from the cursor's "
        "event, or the newest, down to this page's last event, or the first when no page follows), per person "
        "and day, newest first; empty otherwise"
    )
    folded_reads_complete: bool = Field(
        default=True,
        description="false when the stretch was too long to count whole: folded_reads count its newest "
        "AUDIT_FOLD_SCAN_MAX events, and older console reads in it are neither listed nor counted",
    )


def _seq(seq: object) -> int:
    """The log pages newest first: its cursor is the sequence number of the last event shown."""
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise ValueError("not a sequence number")
    return seq


def _visible(ctx: Context) -> Q:
    """The whole tenant's log for an ADMIN; a MEMBER's own calls and their agents' otherwise."""
    if ctx.caller.has_role(Role.ADMIN):
        return Q()
    assert ctx.caller.user is not None
    return Q(person_id=ctx.caller.user.pk)


def _filters(data: AuditListIn) -> Q:
    q = Q()
    if data.operation:
        q &= Q(operation=data.operation)
    if data.principal:
        q &= Q(principal=data.principal)
    if data.person_id:
        q &= Q(person_id=_uuid(data.person_id))
    if data.credential_id:
        q &= Q(credential_id=data.credential_id)
        if data.credential_kind:
            q &= Q(credential_kind=data.credential_kind)
    elif data.credential_kind:
        q &= Q(credential_kind=data.credential_kind)
    if data.outcome == "refused":
        q &= ~Q(outcome="ok")
    elif data.outcome:
        q &= Q(outcome=data.outcome)
    if data.since:
        q &= Q(created_at__gte=data.since)
    if data.until:
        q &= Q(created_at__lt=data.until)
    return q


def _uuid(value: object) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


class _Names:
    """The names of what a page of events speaks of, each looked up once and only in the caller's tenant."""

    def __init__(self, ctx: Context, events: list[AuditEvent]) -> None:
        tenant = ctx.tenant
        people = {e.person_id for e in events if e.person_id}
        ids = {u for e in events for t in e.targets if (u := _uuid(t.get("id"))) is not None}
        keys = {c for e in events if e.credential_kind == "apikey" if (c := _uuid(e.credential_id))}
        connections = {c for e in events if e.credential_kind == "oauth" if (c := _uuid(e.credential_id))}
        rules = {c for e in events if e.credential_kind == "rule" if (c := _uuid(e.credential_id))}
        members = members_by_user_ids(tenant=tenant, user_ids=people | ids)
        self.people = {m.user_id: m.user.email for m in members}
        self.rows: dict[uuid.UUID, tuple[str, str | None]] = {}
        for m in members:
            self.rows[m.pk] = ("member", m.user.email)
            self.rows[m.user_id] = ("person", m.user.email)
        for k in api_keys_by_ids(tenant=tenant, ids=keys | ids):
            self.rows[k.pk] = ("API key", f"{k.name or 'unnamed'} ({k.prefix}_…)")
        for row in connections_by_ids(tenant=tenant, ids=connections | ids):
            self.rows[row.pk] = ("connection", row.client_name or "an assistant")
        # mail is never named here: its subject or name is a stranger's text
        for rule in rules_by_ids(tenant=tenant, ids=rules | ids):
            self.rows[rule.pk] = ("rule", rule.name)
        self.rows.update(mail_names(tenant=tenant, ids=ids))
        self.rows.update(workspace_names(tenant=tenant, ids=ids))
        self.rows.update(outbound_names(tenant=tenant, ids=ids))

    def target(self, raw: dict[str, object]) -> TargetOut:
        key = _uuid(raw.get("id"))
        kind, name = self.rows.get(key, ("", None)) if key is not None else ("", None)
        return TargetOut(id=str(raw.get("id")), kind=kind, name=name, before=raw.get("before"), after=raw.get("after"))

    def credential(self, event: AuditEvent) -> str | None:
        key = _uuid(event.credential_id)
        return self.rows[key][1] if key in self.rows else None


_DOOR_WORDS = {
    "ui": "in the console",
    "cli": "at the command line",
    "mcp": "over MCP",
    "api": "over the REST API",
    "internal": "",
}
_CREDENTIAL_WORDS = {"apikey": "API key", "oauth": "connection"}


def _actor(event: AuditEvent, person: str | None, credential: str | None) -> str:
    if event.principal == "internal":
        return "Oaken"
    if event.principal == "agent":
        kind = _CREDENTIAL_WORDS.get(event.credential_kind, "agent")
        who = f"{kind} {credential}" if credential else f"a removed {kind}"
        return f"{who} for {person}" if person else who
    if event.credential_kind == "rule":  # a person's rule, acting as them (docs/rules.md)
        who = f"rule {credential}" if credential else "a removed rule"
        return f"{who} of {person or 'a former member'}"
    if event.credential_kind == "ailabel":
        return f"an AI label of {person or 'a former member'}"
    if event.credential_kind == "autoreply":  # sent by itself on the authority its approver gave
        return f"automatic mail approved by {person or 'a former member'}"
    return person or "a former member"


def _plural(kind: str) -> str:
    return kind[:-1] + "ies" if kind.endswith("y") else kind if kind.endswith("s") else kind + "s"


def _what(targets: list[TargetOut]) -> str:
    """The objects an event touched, each counted once: one call may change one object twice (a send sets its
    request waiting, then sent), which is one outbound request, not two."""
    distinct = list({(t.kind, t.id): t for t in targets}.values())
    if not distinct:
        return ""
    named = [f"{t.kind} {t.name}" for t in distinct if t.name]
    counts = Counter(t.kind or "item" for t in distinct if not t.name)
    parts = named[:3] + [f"{n} {_plural(kind) if n > 1 else kind}" for kind, n in counts.items()]
    if len(named) > 3:
        parts.append(f"{len(named) - 3} more")
    return " on " + ", ".join(parts)


def _description(event: AuditEvent, actor: str, targets: list[TargetOut]) -> str:
    words = event.operation.replace("_", " ")
    where = _DOOR_WORDS.get(event.door, "")
    where = f" {where}" if where else ""
    # a call of undo_agent_actions names the event it reverses first among its targets (apps.gate.dispatch)
    undoing = next((t.after for t in targets if t.id == REVERSES and isinstance(t.after, dict)), None)
    if undoing is not None:
        targets = [t for t in targets if t.id != REVERSES]
        where += f", undoing event #{undoing.get('event')}"
    if event.outcome == "ok":
        return f"{actor} {words}{_what(targets)}{where}"
    return f"{actor} was refused {words}{where}: {event.outcome}"


# what a person's reads looked at, by the module their operation is defined in
_AREAS = {
    "mail_read": "mail",
    "mail_organize": "mail",
    "search": "mail",
    "summaries": "mail",
    "drafts": "drafts",
    "signatures": "signatures",
    "files": "files",
    "downloads": "files",
    "outbound_requests": "outbound mail",
    "outbound_review": "outbound mail",
    "delivery": "outbound mail",
    "budgets": "budgets",
    "policies": "send policies",
    "agents": "assistants",
    "audit": "the audit log",
    "mailboxes": "mailboxes",
    "importing": "imports",
    "tenancy": "members and workspaces",
    "admin": "settings",
    "plugins": "plugins",
    "preferences": "preferences",
    "reference": "the reference",
}


def _area(name: str) -> str:
    op = registry.get(name)
    if op is None:
        return "an operation no longer offered"
    if op.plugin:
        return f"the {op.plugin} plugin"
    module = op.handler.__module__.rsplit(".", 1)[-1]
    return _AREAS.get(module, module.replace("_", " "))


def _console_reads() -> Q:
    """A person's own successful reads in the console: what its pages load and refresh, by the hundred an hour."""
    reads = [op.name for op in registry if op.op_class == OpClass.READ]
    return Q(principal="person", door="ui", outcome="ok", operation__in=reads)


def _listed(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _folded(ctx: Context, where: Q, before: int | None, after: int) -> list[FoldedReadsOut]:
    runs = reads_by_person_day(tenant=ctx.tenant, where=where & _console_reads(), after=after, before=before)
    people = {
        m.user_id: m.user.email
        for m in members_by_user_ids(tenant=ctx.tenant, user_ids={r.person_id for r in runs if r.person_id})
    }
    me = ctx.caller.user.pk if ctx.caller.user is not None else None
    out = []
    for run in runs:
        person = people.get(run.person_id, "a former member") if run.person_id else None
        areas = list(dict.fromkeys(_area(name) for name in run.operations))
        who = "You" if run.person_id == me else person or "Someone"
        times = "once" if run.count == 1 else f"{run.count} times"
        out.append(
            FoldedReadsOut(
                person_id=str(run.person_id) if run.person_id else None,
                person=person,
                count=run.count,
                first_seq=run.first_seq,
                last_seq=run.last_seq,
                first_at=run.first_at,
                last_at=run.last_at,
                areas=areas,
                description=f"{who} looked at {_listed(areas)} in the console {times}",
            )
        )
    return out


@operation(
    name="list_audit_events",
    summary="The audit log, newest first, filtered, each event in words (an ADMIN sees the tenant's; a MEMBER "
    "their own calls and their agents'). Never offered to agents.",
    input=AuditListIn,
    output=AuditListOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    bounds=(Bound("limit", "PAGE_SIZE_MAX"),),
)
def list_audit_events(ctx: Context, data: AuditListIn) -> AuditListOut:
    size = data.size(ctx.bounds)
    before = read_cursor(data.cursor or None, 1, _seq)
    where = _visible(ctx) & _filters(data)
    fold = data.console_reads == "fold"
    shown = where & ~_console_reads() if fold else where
    events = events_page(tenant=ctx.tenant, where=shown, before=before, limit=size + 1)
    page, next_cursor = cut_page(events, size, lambda e: [e.seq])
    names = _Names(ctx, page)
    folded, complete = [], True
    if fold:
        # the stretch this page covers, from its newest end: at most AUDIT_FOLD_SCAN_MAX events are counted
        after = page[-1].seq if next_cursor else 0
        newest = before - 1 if before is not None else head_seq(ctx.tenant.pk)
        counted_from = max(after, newest - ctx.bounds.AUDIT_FOLD_SCAN_MAX)
        complete = counted_from == after
        folded = _folded(ctx, where, before, counted_from)
    return AuditListOut(
        events=[_row(names, e) for e in page],
        next_cursor=next_cursor,
        folded_reads=folded,
        folded_reads_complete=complete,
    )


def _row(names: _Names, e: AuditEvent) -> AuditEventOut:
    person = names.people.get(e.person_id) if e.person_id else None
    if e.person_id and person is None:
        person = "a former member"
    credential = names.credential(e) if e.credential_id else None
    targets = [names.target(t) for t in e.targets]
    return AuditEventOut(
        seq=e.seq,
        created_at=e.created_at,
        principal=e.principal,
        person_id=str(e.person_id) if e.person_id else None,
        person=person,
        credential_kind=e.credential_kind,
        credential_id=e.credential_id,
        credential=credential,
        door=e.door,
        operation=e.operation,
        outcome=e.outcome,
        targets=targets,
        description=_description(e, _actor(e, person, credential), targets),
        input_digest=e.input_digest,
        hash=e.hash,
    )


# ---------------------------------------------------------------- get_audit_event


class AuditEventIn(Closed):
    seq: int = Field(ge=1, description="the event's sequence number in the tenant's chain")


class AuditEventDetailOut(Closed):
    event: AuditEventOut
    who: str = Field(description="who called, in words: a person, or a key or connection and for whom, or Oaken")
    on_behalf_of: str | None = Field(description="the person an agent's key or connection acts for")
    door_words: str = Field(description="which door, in words")
    operation_words: str
    prev_hash: str = Field(description="the hash of the event before this one (64 zeros for the first)")
    previous_seq: int | None = Field(description="the event before, when the caller may see it")
    next_seq: int | None = Field(
        description="the event after (whose prev_hash is this hash), when the caller may see it"
    )


_DOOR_NAMES = {
    "ui": "the web console",
    "cli": "the command line",
    "mcp": "MCP (an assistant's door)",
    "api": "the REST API (an assistant's or a script's key or token)",
    "internal": "inside Oaken (tasks and plugins)",
}


@operation(
    name="get_audit_event",
    summary="One audit event in full: who (and for whom), which door, the operation and its outcome, what it changed "
    "before and after, the input digest, its hash and the previous one (an ADMIN any of the tenant's; a MEMBER their "
    "own calls and their agents'). Never offered to agents.",
    input=AuditEventIn,
    output=AuditEventDetailOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
)
def get_audit_event(ctx: Context, data: AuditEventIn) -> AuditEventDetailOut:
    visible = _visible(ctx)
    event = event_by_seq(tenant=ctx.tenant, seq=data.seq, where=visible)
    if event is None:
        raise OakenError.not_found("seq")
    names = _Names(ctx, [event])
    row = _row(names, event)
    neighbours = visible_seqs(tenant=ctx.tenant, where=visible, seqs=[data.seq - 1, data.seq + 1])
    on_behalf = row.person if event.principal == "agent" else None
    return AuditEventDetailOut(
        event=row,
        who=_actor(event, row.person, row.credential),
        on_behalf_of=on_behalf,
        door_words=_DOOR_NAMES.get(event.door, event.door),
        operation_words=event.operation.replace("_", " "),
        prev_hash=event.prev_hash,
        previous_seq=data.seq - 1 if data.seq - 1 in neighbours else None,
        next_seq=data.seq + 1 if data.seq + 1 in neighbours else None,
    )


# ---------------------------------------------------------------- verify_audit


class VerifyOut(Closed):
    ok: bool
    events_checked: int
    head_seq: int = Field(
        description="the sequence number of the last event accepted: the chain's head when it is intact, as committed "
        "before this call (this call's own event comes after it); export_audit_chain's up_to ends an export there"
    )
    head_hash: str = Field(description="the hash of the last event accepted: the chain's head when it is intact")
    first_broken_seq: int | None
    reason: str | None
    broken_operation: str | None = Field(description="the first broken event's operation (None when it is missing)")
    broken_at: datetime | None


@operation(
    name="verify_audit",
    summary="Walk the tenant's audit hash chain: intact with its event count and head hash, or its first broken event.",
    input=Empty,
    output=VerifyOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
)
def verify_audit(ctx: Context, data: Empty) -> VerifyOut:
    # The chain is read as committed before this call; this call's own event comes after it.
    status = committed_chain_status(ctx.tenant.pk)
    broken = status.broken
    event = None
    if broken is not None and broken.event_id is not None:
        event = event_by_id(tenant=ctx.tenant, event_id=broken.event_id)
    return VerifyOut(
        ok=broken is None,
        events_checked=status.checked,
        head_seq=status.head_seq,
        head_hash=status.head_hash,
        first_broken_seq=broken.seq if broken else None,
        reason=broken.reason if broken else None,
        broken_operation=event.operation if event else None,
        broken_at=event.created_at if event else None,
    )


# ---------------------------------------------------------------- export_audit_chain


class ExportIn(Closed):
    limit: int | None = Field(default=None, ge=1, description="events per page (default and maximum: a setting)")
    cursor: str | None = Field(default=None, max_length=500, description="from the previous page's next_cursor")
    up_to: int | Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] | None = Field(
        default=None,
        description="end the export at this event, by sequence number or hash (verify_audit's head_seq or head_hash), "
        "so its last line's hash is the one verified; default: the newest event when the first page is asked for. "
        "Read on the first page only: the cursor carries it on",
    )


class ExportOut(Closed):
    lines: list[str] = Field(description="one event per line, oldest first, in the canonical form (docs/audit.md)")
    next_cursor: str | None
    head_seq: int = Field(description="the export ends at this event: the newest when its first page was asked for")


def _position(after: object, upto: object) -> tuple[int, int]:
    return _seq(after), _seq(upto)


def _end(ctx: Context, up_to: int | str | None) -> int:
    """Where an export ends: the event `up_to` names (by sequence number or hash), else the chain's head now."""
    head = head_seq(ctx.tenant.pk)
    if up_to is None:
        return head
    if isinstance(up_to, int):
        if not 0 <= up_to <= head:
            raise OakenError.not_found("up_to")
        return up_to
    event = event_by_hash(tenant=ctx.tenant, digest=up_to)
    if event is None or event.seq > head:
        raise OakenError.not_found("up_to")
    return event.seq


@operation(
    name="export_audit_chain",
    summary="The tenant's whole audit chain as JSON lines in its canonical form, oldest first, a page at a time, "
    "to verify offline (docs/audit.md). Never offered to agents.",
    input=ExportIn,
    output=ExportOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    bounds=(Bound("limit", "AUDIT_EXPORT_PAGE_MAX"),),
)
def export_audit_chain(ctx: Context, data: ExportIn) -> ExportOut:
    size = data.limit or ctx.bounds.AUDIT_EXPORT_PAGE_MAX
    # the export is of the chain as it was at its first page: the export's own calls come after it
    after, upto = read_cursor(data.cursor or None, 2, _position) or (0, _end(ctx, data.up_to))
    rows = events_between(tenant=ctx.tenant, after=after, upto=upto, limit=size)
    last = rows[-1].seq if rows else upto
    more = bool(rows) and last < upto
    return ExportOut(
        lines=[exported_line(e) for e in rows],
        next_cursor=encode_cursor([last, upto]) if more else None,
        head_seq=upto,
    )
