"""Rules acting on new mail (the beat's `rules.run`): the engine, on the internal door.

Mail waits in RulePending (queued by PostgreSQL as it is stored, or by apply_rule). A run leases a batch of one
tenant's entries (FOR UPDATE SKIP LOCKED, then held for _LEASE: any number of workers share the queue), decides which
rules act on each message (apps.rules.engine), and then, in one transaction per rule, records what the rule does to
each message (RuleApplication, unique per rule version: a message some other run recorded is left out), makes each
action a gate call as the rule's owner (Caller.standing: their role and workspaces of now, audited with the rule as
the credential) and records the outcomes; last, the entries leave the queue. A run that dies mid-way leaves each
rule's work done whole or not at all, and its entries to the next run after the lease, which skips what is recorded:
an action happens once per rule version whatever re-syncs, retries or duplicate deliveries there are. A failing
action is recorded on the message and the rule; it never blocks the other actions, rules or messages. Transactions
are one rule's calls long, so the tenant's audit chain is never held for a whole batch.

A rule whose owner left the tenant, or no longer reaches its workspace, is stopped (the operation `stop_rule`,
audited) and acts on nothing more until a person who may confirms it again. A message an "about" condition waits
on is put off until the search enricher has embedded it, and one a label condition waits on until that AI label
has decided it (at most RULES_EMBEDDING_WAIT_SECONDS; after that the condition is judged as it stands).

A `forward` action sends only on a person's approval of exactly what the rule is now (apps.operations.forwarding):
each message is one `send_automatically` call as the person who approved it, once per message whatever re-syncs.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.core.bounds import bounds
from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.core.kinds import CredentialKind, Door
from apps.gate.dispatch import dispatch
from apps.gate.internal import call_internal
from apps.mail.models import FolderKind, Label, Message
from apps.operations import forwarding
from apps.outbound import automations
from apps.outbound.models import Automation, AutomationState
from apps.rules import selectors, services
from apps.rules.conditions import Facts, ForwardAction
from apps.rules.engine import Decision, Loaded, decisions, load
from apps.rules.models import Rule
from apps.search.models import LabelDecision
from apps.search.similarity import embedded
from apps.worker.autoreplies import approver
from apps.workspaces.models import Membership, Tenant

log = logging.getLogger("oaken.rules")

# entries a transaction takes (one tenant's); a run goes on until the queue is empty or RUN_SECONDS have passed
BATCH = 1000
RUN_SECONDS = 50
_PUT_OFF = timedelta(seconds=15)
# how long a run holds the entries it took: a run that dies leaves them to another after this
_LEASE = timedelta(minutes=5)


def run(*, seconds: float = RUN_SECONDS) -> int:
    """Act on waiting mail until none is left (or `seconds` have passed); how many entries were taken."""
    deadline = timezone.now() + timedelta(seconds=seconds)
    taken = 0
    while timezone.now() < deadline:
        count = run_batch()
        if count == 0:
            break
        taken += count
    return taken


def run_batch(now: datetime | None = None) -> int:
    """One batch of one tenant's waiting entries; how many were taken (0: nothing waits now)."""
    now = now or timezone.now()
    claimed = services.claim(now=now, lease=_LEASE, limit=BATCH)
    if claimed is None:
        return 0
    tenant, rows = claimed
    _handle(tenant, rows, now)
    return len(rows)


def _owners(tenant: Tenant, rules: Sequence[Rule]) -> dict[Any, Membership]:
    # a deactivated person acts no more (their keys and connections stop too): as if they had left
    found = Membership.objects.for_tenant(tenant).filter(user_id__in={r.owner_id for r in rules}, user__is_active=True)
    return {m.user_id: m for m in found.select_related("tenant", "user")}


def _still_allowed(tenant: Tenant, rules: list[Rule]) -> tuple[list[Rule], dict[Any, Membership]]:
    """The rules whose owner may still do what they do; the others are stopped, saying why."""
    owners = _owners(tenant, rules)
    running = []
    for rule in rules:
        member = owners.get(rule.owner_id)
        reason = ""
        if member is None:
            reason = "owner_left"
        else:
            given = member.workspace_names()
            if given is not None and rule.workspace.name not in given:
                reason = "owner_lost_workspace"
        if reason:
            try:
                call_internal(tenant, "stop_rule", {"rule_id": str(rule.pk), "reason": reason})
            except OakenError as error:
                if error.code != "CONFLICT":  # CONFLICT: another worker stopped it meanwhile
                    raise
            continue
        running.append(rule)
    return running, owners


def _handle(tenant: Tenant, rows: list[dict[str, Any]], now: datetime) -> None:
    one_rule = {r["rule_id"] for r in rows if r["rule_id"] is not None}
    active = Rule.objects.for_tenant(tenant).filter(stopped_reason="").select_related("workspace", "owner")
    rules, owners = _still_allowed(
        tenant, list(active.filter(Q(enabled=True) | Q(pk__in=one_rule)).order_by("position", "created_at", "id"))
    )
    if not rules:
        services.taken(tenant=tenant, pending_ids=[r["id"] for r in rows])
        return
    entries = load(rules)
    # a message waits for every enabled rule (new mail), and/or (apply_rule) for each of some rules, enabled or not:
    # one message can have several entries in the batch, each served
    new_mail = {r["message_id"] for r in rows if r["rule_id"] is None}
    wanted: dict[Any, set[Any]] = defaultdict(set)
    for r in rows:
        if r["rule_id"] is not None:
            wanted[r["rule_id"]].add(r["message_id"])
    every = [e for e in entries if e.rule.enabled]
    messages = Message.objects.for_tenant(tenant).filter(pk__in=list({r["message_id"] for r in rows}))
    facts = selectors.facts_of(tenant, messages, [e.body for e in entries])
    waiting = _waiting_for_embedding(tenant, entries, facts, rows, now) | _waiting_for_labels(
        tenant, entries, facts, rows, now
    )
    if waiting:
        services.put_off(
            tenant=tenant, pending_ids=[r["id"] for r in rows if r["message_id"] in waiting], until=now + _PUT_OFF
        )
        facts = [f for f in facts if f.id not in waiting]
    done = selectors.already_applied(tenant, [(e.rule.pk, e.rule.version) for e in entries], [f.id for f in facts])
    found = decisions(every, [f for f in facts if f.id in new_mail], now, done=done)
    seen = {(d.rule.rule.pk, d.facts.id) for d in found}
    for entry in entries:
        ids = wanted.get(entry.rule.pk)
        if ids:
            one = decisions([entry], [f for f in facts if f.id in ids], now, done=done)
            found += [d for d in one if (entry.rule.pk, d.facts.id) not in seen]
    _act(tenant, found, owners, now)
    services.taken(tenant=tenant, pending_ids=[r["id"] for r in rows if r["message_id"] not in waiting])


def _waiting_for_embedding(
    tenant: Tenant, entries: list[Loaded], facts: list[Facts], rows: list[dict[str, Any]], now: datetime
) -> set[Any]:
    """Messages an "about" rule covering them cannot judge yet: not embedded, and queued less than the wait ago."""
    abouts = [e for e in entries if e.about]
    if not abouts:
        return set()
    wait = timedelta(seconds=bounds.RULES_EMBEDDING_WAIT_SECONDS)
    recent = {r["message_id"] for r in rows if r["queued_at"] > now - wait}
    candidates = [f.id for f in facts if f.id in recent and any(e.covers(f) for e in abouts)]
    if not candidates:
        return set()
    return set(candidates) - embedded(tenant, candidates)


def _waiting_for_labels(
    tenant: Tenant, entries: list[Loaded], facts: list[Facts], rows: list[dict[str, Any]], now: datetime
) -> set[Any]:
    """Messages a rule's label condition cannot judge yet: the label is an AI label (with a description) that has
    not decided the message (stored after its description), and the message was queued less than the wait ago."""
    named = {i for e in entries for i in e.body.label_ids()}
    if not named:
        return set()
    labels = [
        label
        for label in selectors.labels_named(tenant, named).values()
        if label.description and not label.ai_stopped and label.description_at is not None
    ]
    wait = timedelta(seconds=bounds.RULES_EMBEDDING_WAIT_SECONDS)
    recent = {r["message_id"] for r in rows if r["queued_at"] > now - wait}
    candidates = [f for f in facts if f.id in recent]
    if not labels or not candidates:
        return set()
    decided = set(
        LabelDecision.objects.for_tenant(tenant)
        .filter(label__in=labels, message_id__in=[f.id for f in candidates])
        .values_list("label_id", "message_id", "version")
    )
    waiting = set()
    for fact in candidates:
        for label in labels:
            ai = str(label.pk)
            asks = any(ai in e.body.label_ids() and e.covers(fact) for e in entries)
            after = fact.id >= automations.id_at(label.description_at)  # type: ignore[arg-type]
            undecided = (label.pk, fact.id, label.description_version) not in decided and ai not in fact.labels
            if asks and label.account_id == fact.account_id and after and undecided:
                waiting.add(fact.id)
    return waiting


def _act(tenant: Tenant, found: list[Decision], owners: dict[Any, Membership], now: datetime) -> None:
    """Each rule's actions on the messages it matched, one transaction a rule: the record of what it does to each
    message is written first (once per rule version: a message another run recorded is left out), then the actions
    run as its owner, then their outcomes are recorded, so a run that dies on the way leaves nothing half done."""
    by_rule: dict[Any, list[Decision]] = defaultdict(list)
    for decision in found:
        by_rule[decision.rule.rule.pk].append(decision)
    for decisions_of_rule in by_rule.values():
        entry = decisions_of_rule[0].rule
        caller = Caller.standing(owners[entry.rule.owner_id], kind=CredentialKind.RULE, source_id=str(entry.rule.pk))
        with transaction.atomic():
            fresh = services.begin(
                tenant=tenant, rule=entry.rule, matched={d.facts.id: d.matched for d in decisions_of_rule}, now=now
            )
            mine = [d.facts for d in decisions_of_rule if d.facts.id in fresh]
            outcomes: dict[Any, list[dict[str, str]]] = {f.id: [] for f in mine}
            for action in entry.body.actions:
                if action.action == "stop" or not mine:
                    continue
                if isinstance(action, ForwardAction):
                    done = _forwarded(entry, action.to, mine)
                else:
                    done = _perform(caller, action, mine, now)
                for message_id, outcome in done.items():
                    outcomes[message_id].append({"action": _named(action), "outcome": outcome})
            services.finish(tenant=tenant, rule=entry.rule, outcomes=outcomes, now=now)


def _named(action: Any) -> str:
    """An action in words, as the message's record keeps it (the rule's terms)."""
    if action.action in ("add_label", "remove_label"):
        return f"{action.action.replace('_', ' ')} {action.label}"
    if action.action == "move":
        return f"move to {action.folder}"
    if action.action == "snooze":
        return f"snooze {action.days} days"
    if action.action == "forward":
        return f"forward to {action.to}"
    return str(action.action).replace("_", " ")


def _call(caller: Caller, name: str, data: dict[str, Any]) -> dict[str, Any]:
    """One action through the gate, as the rule's owner, in a savepoint of the engine's transaction."""
    with transaction.atomic():
        return dispatch(caller, Door.INTERNAL, name, data, confirm=True).output


def _each(caller: Caller, name: str, data: dict[str, Any], ids: list[Any]) -> dict[Any, str]:
    """The call for all these messages at once; when it is refused, each message alone, so one message's refusal
    is its own (each refusal is audited)."""
    if len(ids) > bounds.BATCH_MAX:
        step = bounds.BATCH_MAX
        return {k: v for i in range(0, len(ids), step) for k, v in _each(caller, name, data, ids[i : i + step]).items()}
    if not ids:
        return {}
    try:
        _call(caller, name, data | {"message_ids": [str(i) for i in ids]})
        return dict.fromkeys(ids, "ok")
    except OakenError as error:
        if len(ids) == 1:
            return {ids[0]: error.code}
    outcomes = {}
    for one in ids:
        try:
            _call(caller, name, data | {"message_ids": [str(one)]})
            outcomes[one] = "ok"
        except OakenError as error:
            outcomes[one] = error.code
    return outcomes


def _forwarded(entry: Loaded, to: str, facts: list[Facts]) -> dict[Any, str]:
    """A forwarding rule's forward to `to`: each message sent on the authority of the person who approved exactly
    what the rule is now (that forward's content hash), as that person; while none did, nothing is sent
    (awaiting_approval). ok: forwarded; skipped: Oaken forwarded it there already (this or another copy), or it came
    from the destination."""
    ids = [f.id for f in facts]
    rule = entry.rule
    automation = (
        Automation.objects.for_tenant(rule.tenant)
        .filter(rule=rule, forward_to=to, state=AutomationState.ACTIVE)
        .select_related("tenant", "account__workspace")
        .first()
    )
    approved = {c.digest() for c in forwarding.contents_for(rule, entry.body) if c.forward_to == to}
    if automation is None or automation.content_hash not in approved:
        return dict.fromkeys(ids, "awaiting_approval")
    caller = approver(automation)
    if caller is None:  # its approver's authority is gone: ended (audited), nothing sent
        return dict.fromkeys(ids, "approver_gone")
    outcomes = {}
    for one in ids:
        try:
            done = _call(caller, "send_automatically", {"automation_id": str(automation.pk), "message_id": str(one)})
            outcomes[one] = "ok" if done["outcome"] == automations.FORWARDED else "skipped"
        except OakenError as error:
            outcomes[one] = error.code
    return outcomes


def _perform(caller: Caller, action: Any, facts: list[Facts], now: datetime) -> dict[Any, str]:
    """Each message's outcome of one action: ok, skipped (nothing to do), or the gate's refusal code."""
    ids = [f.id for f in facts]
    kind = action.action
    if kind == "mark_read":
        return _each(caller, "mark_read", {}, ids)
    if kind == "pin":
        return _each(caller, "set_pinned", {"pinned": True}, ids)
    if kind == "move":
        if action.folder.casefold() == FolderKind.TRASH:
            return _each(caller, "trash_messages", {}, ids)
        return _each(caller, "move_messages", {"folder": action.folder}, ids)
    if kind == "skip_inbox":
        inbox = [f.id for f in facts if f.folder_kind == FolderKind.INBOX]
        return dict.fromkeys(ids, "skipped") | _each(caller, "move_messages", {"folder": "archive"}, inbox)
    if kind == "snooze":
        here = [f.id for f in facts if f.folder_kind not in (FolderKind.TRASH, FolderKind.SPAM)]
        until = (now + timedelta(days=action.days)).isoformat()
        return dict.fromkeys(ids, "skipped") | _each(caller, "snooze_messages", {"until": until}, here)
    return _labelled(caller, action, facts)


def _labelled(caller: Caller, action: Any, facts: list[Facts]) -> dict[Any, str]:
    """add_label / remove_label: the label of that name in each message's mailbox (created by add_label)."""
    outcomes: dict[Any, str] = {}
    by_account: dict[Any, list[Any]] = defaultdict(list)
    for f in facts:
        by_account[f.account_id].append(f.id)
    for account_id, ids in by_account.items():
        label = Label.objects.for_tenant(caller.tenant).filter(account_id=account_id, name=action.label).first()
        if label is None and action.action == "remove_label":
            outcomes |= dict.fromkeys(ids, "skipped")
            continue
        label_id = str(label.pk) if label is not None else None
        if label_id is None:
            try:
                made = _call(caller, "create_label", {"account_id": str(account_id), "name": action.label})
            except OakenError as error:
                outcomes |= dict.fromkeys(ids, error.code)
                continue
            label_id = made["label"]["id"]
        name = "add_labels" if action.action == "add_label" else "remove_labels"
        outcomes |= _each(caller, name, {"label_ids": [label_id]}, ids)
    return outcomes
