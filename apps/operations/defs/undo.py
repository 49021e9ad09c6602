"""Undo what an assistant did (issue 42 item 4): persons only, never offered to agents.

The audit log is the record: each change an agent made is an event whose targets hold the values before and after.
A reversal is planned for each one whose thing is still as the agent left it (its recorded `after`); one that
changed since is skipped and said why, and what cannot be taken back (mail that left, a draft's earlier text) is
listed as such. Each reversal is an ordinary operation called through the whole gate as the person (ctx.call), in
this call's transaction, and its audit event names the event it reverses ({"id": "reverses", "after": {"event":
seq}} first among its targets; docs/audit.md). Events are undone newest first, so a chain of an agent's changes to
one message (archived, then trashed) unwinds to where it began.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Annotated, Any

from django.db.models import Q
from pydantic import AwareDatetime, ConfigDict, Field, model_validator

from apps.agents.selectors import access_api_key_by_id, access_connection_by_id
from apps.audit.models import AuditEvent
from apps.audit.selectors import changes_after, changes_newest_first
from apps.core import words
from apps.core.changes import REVERSES, Change
from apps.core.errors import OakenError
from apps.core.kinds import Role
from apps.mail.selectors import label_names, message_states
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Id
from apps.operations.registry import ALWAYS, Callers, Ceiling, OpClass, Preview, operation, registry
from apps.outbound.selectors import drafts_existing, requests_by_ids
from apps.rules.selectors import rules_in
from apps.rules.services import rule_state

# the newest events one undo looks at, and the later events it reads to say who changed a thing since
EVENTS_MAX = 500
LATER_MAX = 5000

_READ = ("mark_read", "mark_unread", "summarize_messages")
_FOLDERS = ("move_messages", "trash_messages", "restore_messages")
_LABELS = ("add_labels", "remove_labels")
_DRAFTS = ("create_draft", "reply_to_message", "forward_message")
CHANGED_SINCE = "a person changed it since"
AGAIN = "the assistant changed it again since, in a way that cannot be undone"
_SINCE_BY = {
    "person": CHANGED_SINCE,
    "agent": "another assistant changed it since",
    "internal": "a rule changed it since",
}


class UndoIn(Closed):
    # a credential and a moment, or the events themselves (published here; the model checks it too)
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {
                    "required": ["credential_id", "since"],
                    "properties": {"credential_id": {"type": "string"}, "since": {"type": "string"}},
                },
                {"required": ["event_seqs"], "properties": {"event_seqs": {"minItems": 1}}},
            ]
        }
    )
    credential_id: Id | None = Field(default=None, description="the API key's or connection's id")
    since: AwareDatetime | None = Field(default=None, description="what it did at or after this time")
    until: AwareDatetime | None = Field(default=None, description="and before this time (default: now)")
    event_seqs: list[Annotated[int, Field(ge=1)]] = Field(
        default=[], max_length=EVENTS_MAX, description="or these audit events (their seq), an assistant's changes"
    )

    @model_validator(mode="after")
    def _named(self) -> UndoIn:
        if not self.event_seqs and (self.credential_id is None or self.since is None):
            raise ValueError("name credential_id and since, or event_seqs")
        return self


@dataclass
class Step:
    """One reversal: the operation to call as the person, and the event it reverses."""

    event: int
    target: str
    operation: str
    input: dict[str, Any]
    kind: str  # how it is said: "read", "unread", "pin", "unpin", "label off", "label on", "move", "draft", "rule"
    detail: str = ""  # a label's id, a folder, a rule's name
    before: Any = None
    after: Any = None


@dataclass
class Left:
    """An event's change not undone: skipped (it changed since) or beyond undoing (mail that left)."""

    event: int
    target: str
    why: str


@dataclass
class Plan:
    credential: str
    steps: list[Step] = field(default_factory=list)
    skipped: list[Left] = field(default_factory=list)
    cannot: list[Left] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)  # where the mail it sent went, in words
    more: bool = False  # more events than one undo looks at
    blocked: set[str] = field(default_factory=set)  # ids a newer change of the assistant's cannot be undone on


def _uuid(value: object) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def _credential(ctx: Context, credential_id: str) -> tuple[str, str]:
    """(kind, name) of an API key or connection the caller may see; NOT_FOUND otherwise (another tenant's too)."""
    try:
        key = access_api_key_by_id(credential_id, tenant=ctx.tenant, actor=ctx.caller)
        return "apikey", f"the API key {words.named(key.name or 'unnamed')} (prefix {key.prefix})"
    except OakenError:
        pass
    try:
        row = access_connection_by_id(credential_id, tenant=ctx.tenant, actor=ctx.caller)
        return "oauth", f"the connection of {words.named(row.client_name or 'an assistant')}"
    except OakenError:
        raise OakenError.not_found("credential_id") from None


def _changing() -> list[str]:
    return [op.name for op in registry if op.op_class != OpClass.READ and op.name != "undo_agent_actions"]


def _events(ctx: Context, data: UndoIn) -> tuple[str, list[AuditEvent], bool]:
    where = Q(principal="agent")
    if not ctx.caller.has_role(Role.ADMIN):
        assert ctx.caller.user is not None
        where &= Q(person_id=ctx.caller.user.pk)  # a MEMBER undoes their own assistants' work only
    credential = "the assistant"
    if data.credential_id is not None:
        kind, credential = _credential(ctx, data.credential_id)
        where &= Q(credential_id=data.credential_id, credential_kind=kind)
    if data.since is not None:
        where &= Q(created_at__gte=data.since)
    if data.until is not None:
        where &= Q(created_at__lt=data.until)
    if data.event_seqs:
        where &= Q(seq__in=set(data.event_seqs))
    events = changes_newest_first(tenant=ctx.tenant, where=where, operations=_changing(), limit=EVENTS_MAX + 1)
    if data.event_seqs and not events:
        raise OakenError.not_found("event_seqs")
    return credential, events[:EVENTS_MAX], len(events) > EVENTS_MAX


def _plan(ctx: Context, data: UndoIn) -> Plan:
    credential, events, more = _events(ctx, data)
    plan = Plan(credential=credential, more=more)
    if not events:
        return plan
    ids = {u for e in events for t in e.targets if (u := _uuid(t.get("id"))) is not None}
    messages = {k: _mutable(v) for k, v in message_states(tenant=ctx.tenant, ids=ids).items()}
    drafts = drafts_existing(tenant=ctx.tenant, ids=ids)
    rules = rules_in(tenant=ctx.tenant, ids=ids)
    requests = requests_by_ids(tenant=ctx.tenant, ids=ids)
    since = _changed_since(ctx, events)
    for event in events:
        for target in event.targets:
            tid = str(target.get("id"))
            if tid == REVERSES:
                continue
            left = _reverse(event, target, messages, drafts, rules, requests, plan)
            if left is not None:
                if left == "changed":
                    left = AGAIN if tid in plan.blocked else _why_changed(since, tid, event.seq)
                    plan.skipped.append(Left(event.seq, tid, left))
                elif left:
                    plan.cannot.append(Left(event.seq, tid, left))
                    plan.blocked.add(tid)
    return plan


def _mutable(state: Any) -> dict[str, Any]:
    return {
        "folder": state.folder,
        "trashed_from": state.trashed_from,
        "read": state.read,
        "pinned": state.pinned,
        "labels": set(state.labels),
    }


def _changed_since(ctx: Context, events: list[AuditEvent]) -> dict[str, list[tuple[int, str]]]:
    """For each id the events touch: the later changes of it by anyone else (a person, another assistant, a rule),
    oldest first, as (seq, why it is no longer as an earlier event left it)."""
    ours = {(e.credential_id, e.credential_kind) for e in events}
    wanted = {str(t.get("id")) for e in events for t in e.targets}
    first = min(e.seq for e in events)
    later = changes_after(tenant=ctx.tenant, seq=first, operations=_changing(), limit=LATER_MAX)
    found: dict[str, list[tuple[int, str]]] = {}
    for other in later:
        if other.principal == "agent" and (other.credential_id, other.credential_kind) in ours:
            continue
        why = _SINCE_BY.get(other.principal, CHANGED_SINCE)
        for tid in {str(t.get("id")) for t in other.targets} & wanted:
            found.setdefault(tid, []).append((other.seq, why))
    return found


def _why_changed(since: dict[str, list[tuple[int, str]]], tid: str, seq: int) -> str:
    return next((why for later, why in since.get(tid, ()) if later > seq), "it changed since")


def _reverse(
    event: AuditEvent,
    target: dict[str, Any],
    messages: dict[str, dict[str, Any]],
    drafts: set[str],
    rules: dict[str, Any],
    requests: dict[str, Any],
    plan: Plan,
) -> str | None:
    """Plan the reversal of one recorded change (the simulated state moves with it, so an older change of the same
    thing is judged against what the newer reversal leaves); else "changed", or why it cannot be undone."""
    op, tid = event.operation, str(target.get("id"))
    before, after = target.get("before"), target.get("after")
    if tid in requests:
        if tid not in plan.sent:
            plan.sent.append(tid)
        return ""
    if op in _READ or op == "set_pinned" or op in _LABELS or op in _FOLDERS:
        if not isinstance(before, dict) or not isinstance(after, dict):
            return f"{op.replace('_', ' ')} recorded no values to go back to"
        state = messages.get(tid)
        if state is None:
            return "the message is gone, or out of your reach"
        return _message_step(event.seq, op, tid, before, after, state, plan)
    if op in _DRAFTS and isinstance(after, dict) and after.get("draft") == "created":
        if tid not in drafts:
            return "the draft is gone (sent or deleted)"
        plan.steps.append(Step(event.seq, tid, "delete_draft", {"draft_id": tid}, "draft"))
        drafts.discard(tid)
        return None
    if op == "update_draft":
        return "a draft's earlier text is not recorded"
    if op == "create_rule" and isinstance(after, dict):
        rule = rules.get(tid)
        if rule is None:
            return "the rule is gone"
        if not _same_rule(rule_state(rule), after):
            return "changed"
        plan.steps.append(Step(event.seq, tid, "delete_rule", {"rule_id": tid}, "rule", detail=rule.name))
        del rules[tid]
        return None
    if op == "update_rule" and isinstance(before, dict) and isinstance(after, dict):
        rule = rules.get(tid)
        if rule is None:
            return "the rule is gone"
        if before.get("body") is None or before.get("body") != after.get("body"):
            return "a rule's earlier conditions and actions are not recorded"
        if not _same_rule(rule_state(rule), after):
            return "changed"
        back = {k: before[k] for k in ("name", "enabled") if before.get(k) != after.get(k)}
        if not back:
            return ""
        plan.steps.append(
            Step(event.seq, tid, "update_rule", {"rule_id": tid, **back}, "rule back", detail=str(before["name"]))
        )
        return None
    return f"{op.replace('_', ' ')}: not something Oaken undoes"


def _same_rule(now: dict[str, Any], recorded: dict[str, Any]) -> bool:
    """The rule is as recorded: name, whether it runs, what it does (its position may move with others')."""
    return all(now.get(k) == recorded[k] for k in ("name", "enabled", "body", "conditions", "actions") if k in recorded)


def _message_step(
    seq: int, op: str, tid: str, before: dict[str, Any], after: dict[str, Any], state: dict[str, Any], plan: Plan
) -> str | None:
    ids = {"message_ids": [tid]}
    if "read" in after:
        if state["read"] != after["read"]:
            return "changed"
        back = bool(before.get("read"))
        name = "mark_read" if back else "mark_unread"
        plan.steps.append(Step(seq, tid, name, ids, "read" if back else "unread", before=after, after=before))
        state["read"] = back
        return None
    if "pinned" in after:
        if state["pinned"] != after["pinned"]:
            return "changed"
        back = bool(before.get("pinned"))
        step = Step(
            seq, tid, "set_pinned", {**ids, "pinned": back}, "pin" if back else "unpin", before=after, after=before
        )
        plan.steps.append(step)
        state["pinned"] = back
        return None
    if "label_id" in after:
        label, on = str(after["label_id"]), bool(after.get("on"))
        if (label in state["labels"]) != on:
            return "changed"
        name = "remove_labels" if on else "add_labels"
        plan.steps.append(
            Step(
                seq,
                tid,
                name,
                {**ids, "label_ids": [label]},
                "label off" if on else "label on",
                detail=label,
                before=after,
                after=before,
            )
        )
        (state["labels"].discard if on else state["labels"].add)(label)
        return None
    if "folder" in after:
        if state["folder"] != after["folder"]:
            return "changed"
        to = str(before["folder"])
        data: dict[str, Any] = ids
        if to == "trash":
            name = "trash_messages"
        elif after["folder"] == "trash" and state["trashed_from"] == to:
            name = "restore_messages"
        else:
            name, data = "move_messages", {**ids, "folder": to}
        plan.steps.append(Step(seq, tid, name, data, "move", detail=to, before=after, after=before))
        state["trashed_from"] = state["folder"] if to == "trash" else None
        state["folder"] = to
        return None
    return f"{op.replace('_', ' ')} recorded no values to go back to"


# ---------------------------------------------------------------- in words


def _folder(name: str) -> str:
    return name.capitalize() if name in ("inbox", "archive", "spam", "trash", "sent", "drafts") else words.named(name)


def _lines(ctx: Context, plan: Plan) -> list[str]:
    labels = label_names(tenant=ctx.tenant, ids=_label_ids(plan))
    counted: Counter[tuple[str, str]] = Counter()
    for step in plan.steps:
        counted[(step.kind, step.detail)] += 1
    lines = []
    for (kind, detail), n in counted.items():
        them = words.count(n, "message")
        said = {
            "read": f"Mark {them} read again",
            "unread": f"Mark {them} unread again",
            "pin": f"Pin {them} again",
            "unpin": f"Unpin {them}",
            "label off": f"Take the label {words.named(labels.get(detail, 'a label'))} off {them}",
            "label on": f"Put the label {words.named(labels.get(detail, 'a label'))} back on {them}",
            "move": f"Move {them} back to {_folder(detail)}",
            "draft": f"Delete {words.count(n, 'draft')} it wrote",
            "rule": f"Delete the rule {words.named(detail)} it made",
            "rule back": f"Put the rule {words.named(detail)} back as it was",
        }[kind]
        lines.append(said + ".")
    for why, n in Counter(left.why for left in plan.skipped).items():
        lines.append(f"Left as it is: {words.count(n, 'change')} ({why}).")
    for where in plan.sent:
        lines.append(f"Cannot be undone: {where}.")
    for why, n in Counter(left.why for left in plan.cannot if left.why).items():
        lines.append(f"Cannot be undone: {words.count(n, 'change')} ({why}).")
    if plan.more:
        lines.append(f"Only its newest {EVENTS_MAX} changes are looked at; undo again for older ones.")
    return lines


def _label_ids(plan: Plan) -> set[uuid.UUID]:
    return {u for s in plan.steps if s.kind.startswith("label") if (u := _uuid(s.detail)) is not None}


def _sent_words(ctx: Context, plan: Plan) -> None:
    """Replace the outbound requests' ids in plan.sent with where the mail went and how far it got."""
    found = requests_by_ids(tenant=ctx.tenant, ids={u for r in plan.sent if (u := _uuid(r)) is not None})
    said = []
    for rid in plan.sent:
        row = found.get(rid)
        if row is None:
            continue
        to = [*row.to, *row.cc, *row.bcc]
        where = words.listed(to) if to else "its recipients"
        said.append(f"mail to {where} ({row.state.replace('_', ' ')})")
    plan.sent = said


def _planned(ctx: Context, data: UndoIn) -> Plan:
    plan = _plan(ctx, data)
    _sent_words(ctx, plan)
    return plan


def _preview(ctx: Context, data: UndoIn) -> Preview:
    plan: Plan = ctx.targets
    changes = tuple(Change(s.target, s.before, s.after) for s in plan.steps)
    what = words.count(len(plan.steps), "change")
    return Preview(
        changes,
        summary=f"Undo {what} that {plan.credential} made"
        + (f"; what changed since ({words.count(len(plan.skipped), 'change')}) stays as it is" if plan.skipped else "")
        + (f"; {words.count(len(plan.sent), 'sent message')} cannot be called back" if plan.sent else "")
        + ".",
        title="Undo what this assistant did?",
        verb="Undo",
        lines=tuple(_lines(ctx, plan)),
    )


def _calls(steps: list[Step]) -> list[list[Step]]:
    """The steps as calls: one event's reversals of messages by the same operation and input go in one call (its
    messages together), so the call's audit event names that event; every other step is a call of its own."""
    calls: list[list[Step]] = []
    for step in steps:
        last = calls[-1][0] if calls else None
        if (
            last is not None
            and "message_ids" in step.input
            and (last.event, last.operation) == (step.event, step.operation)
            and {**last.input, "message_ids": None} == {**step.input, "message_ids": None}
        ):
            calls[-1].append(step)
        else:
            calls.append([step])
    return calls


class UndoneOut(Closed):
    event: int = Field(description="the audit event (seq) whose change this is")
    target: str = Field(description="the id it changed")
    operation: str = Field(description="the operation that reversed it, or ''")
    why: str = Field(description="why it was not undone; '' when it was")


class UndoOut(Closed):
    undone: list[UndoneOut]
    skipped: list[UndoneOut] = Field(description="left as they are: changed since, or refused when undoing")
    not_undoable: list[UndoneOut] = Field(description="what cannot be taken back")
    sent: list[str] = Field(description="mail it sent, which cannot be called back: where it went, in words")


@operation(
    name="undo_agent_actions",
    summary="Undo what an assistant (an API key or connection) changed in a period, or in given audit events: labels,"
    " read state, pins, folders and trash, drafts it wrote, rules it made or changed; what changed since is left.",
    input=UndoIn,
    output=UndoOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    preview=_preview,
    confirm=ALWAYS,
    targets=_planned,
    callers=Callers.PERSONS,
    composes=True,
)
def undo_agent_actions(ctx: Context, data: UndoIn) -> UndoOut:
    """Each reversal is its own call of an ordinary operation (mark_unread, remove_labels, move_messages,
    restore_messages, delete_draft, delete_rule, ...) as you, with its own audit event naming the event it reverses.
    Only what is still as the assistant left it is undone; the rest is listed with why. Sent mail cannot be called
    back: the preview lists where it went."""
    plan: Plan = ctx.targets
    assert ctx.call is not None
    undone: list[UndoneOut] = []
    skipped = [UndoneOut(event=s.event, target=s.target, operation="", why=s.why) for s in plan.skipped]
    for group in _calls(plan.steps):
        first = group[0]
        data_in = dict(first.input)
        if "message_ids" in data_in:
            data_in["message_ids"] = [s.target for s in group]
        try:
            ctx.call(first.operation, data_in, reverses=first.event)
        except OakenError as refused:
            why = refused.message
            skipped.extend(UndoneOut(event=s.event, target=s.target, operation=s.operation, why=why) for s in group)
            continue
        undone.extend(UndoneOut(event=s.event, target=s.target, operation=s.operation, why="") for s in group)
    ctx.touch(
        data.credential_id or "events",
        None,
        {"undone": len(undone), "skipped": len(skipped), "events": sorted({u.event for u in undone})},
    )
    return UndoOut(
        undone=undone,
        skipped=skipped,
        not_undoable=[UndoneOut(event=c.event, target=c.target, operation="", why=c.why) for c in plan.cannot if c.why],
        sent=plan.sent,
    )
