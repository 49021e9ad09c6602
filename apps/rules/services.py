"""Writes of rules: what the rule operations change (each recorded for the audit, never a condition's words), and
the engine's bookkeeping (what a rule did to a message, a failing action, a rule stopped)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import F, Max, Q

from apps.accounts.models import User
from apps.core.acts import Act
from apps.core.errors import OakenError
from apps.mail.models import MailAccount
from apps.rules.conditions import RuleBody, stored
from apps.rules.models import Rule, RuleApplication, RulePending
from apps.workspaces.models import Tenant, Workspace

_NAME_TAKEN = "name: this workspace already has a rule with this name"


def rule_state(rule: Rule) -> dict[str, Any]:
    """What the audit records of a rule: never its conditions' words."""
    return {
        "name": rule.name,
        "enabled": rule.enabled,
        "version": rule.version,
        "position": rule.position,
        "owner": str(rule.owner_id),
        "conditions": len(rule.conditions),
        "actions": sorted({a["action"] for a in rule.actions}),
        # what it matches and does, as a digest: enough to tell (undo_agent_actions) whether a change left them as
        # they were, never their words
        "body": body_digest(rule),
    }


def body_digest(rule: Rule) -> str:
    """A short sha256 over the rule's match, conditions and actions."""
    body = json.dumps([rule.match, rule.conditions, rule.actions], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def _save(rule: Rule, *, fresh: bool) -> None:
    try:
        with transaction.atomic():
            rule.save(force_insert=fresh)
    except IntegrityError:
        raise OakenError("CONFLICT", _NAME_TAKEN, field="name") from None


def create_rule(
    *,
    act: Act,
    owner: User,
    workspace: Workspace,
    account: MailAccount | None,
    name: str,
    body: RuleBody,
    enabled: bool,
    limit: int,
) -> Rule:
    """A new rule, last in its workspace's order; past `limit` rules in the workspace LIMIT_EXCEEDED."""
    rules = Rule.objects.for_tenant(act.tenant).filter(workspace=workspace)
    if rules.count() >= limit:
        raise OakenError("LIMIT_EXCEEDED", f"a workspace keeps at most {limit} rules: delete one first", field="name")
    last = rules.aggregate(last=Max("position"))["last"]
    conditions, actions = stored(body)
    rule = Rule(
        tenant=act.tenant,
        workspace=workspace,
        account=account,
        owner=owner,
        name=name,
        position=0 if last is None else last + 1,
        enabled=enabled,
        match=body.match,
        conditions=conditions,
        actions=actions,
        created_at=act.now,
        updated_at=act.now,
    )
    _save(rule, fresh=True)
    act.touch(rule.pk, None, rule_state(rule))
    return rule


def update_rule(
    *, act: Act, rule: Rule, owner: User, name: str | None, body: RuleBody | None, enabled: bool | None
) -> Rule:
    """Change what is given; a change of what the rule does (body, enabled) makes a new version, owned by the
    person confirming it, and clears a stop."""
    before = rule_state(rule)
    if name is not None:
        rule.name = name
    if body is not None or enabled is not None:
        if body is not None:
            rule.match = body.match
            rule.conditions, rule.actions = stored(body)
        if enabled is not None:
            rule.enabled = enabled
        rule.version += 1
        rule.owner = owner
        rule.stopped_reason, rule.stopped_at = "", None
    rule.updated_at = act.now
    _save(rule, fresh=False)
    act.touch(rule.pk, before, rule_state(rule))
    return rule


def delete_rule(*, act: Act, rule: Rule) -> None:
    act.touch(rule.pk, rule_state(rule), None)
    RuleApplication.objects.for_tenant(act.tenant).filter(rule=rule).update(rule_name=rule.name)
    Rule.objects.for_tenant(act.tenant).filter(pk=rule.pk).delete()


def reorder_rules(*, act: Act, rules: Sequence[Rule]) -> None:
    """Put these rules (all of one workspace) in this order."""
    for position, rule in enumerate(rules):
        if rule.position != position:
            act.touch(rule.pk, {"position": rule.position}, {"position": position})
            Rule.objects.for_tenant(act.tenant).filter(pk=rule.pk).update(position=position, updated_at=act.now)


def queue_for_rule(*, act: Act, rule: Rule, message_ids: Sequence[Any]) -> int:
    """Existing messages waiting for one rule (apply_rule): the engine acts on them as on new mail."""
    rows = [RulePending(tenant=act.tenant, message_id=m, rule=rule, queued_at=act.now) for m in message_ids]
    RulePending.objects.bulk_create(rows, ignore_conflicts=True)
    act.touch(rule.pk, None, {"queued": len(rows), "version": rule.version})
    return len(rows)


def stop_rule(*, act: Act, rule: Rule, reason: str) -> bool:
    """Stop a running rule (its owner lost the authority it acts with); False when it was stopped already."""
    stopped = (
        Rule.objects.for_tenant(act.tenant)
        .filter(pk=rule.pk, stopped_reason="")
        .update(stopped_reason=reason, stopped_at=act.now)
    )
    if stopped:
        act.touch(rule.pk, {"stopped": None}, {"stopped": reason})
    return bool(stopped)


# ---------------------------------------------------------------- the engine's bookkeeping


def taken(*, tenant: Tenant, pending_ids: Sequence[Any]) -> None:
    """These waiting entries are done."""
    RulePending.objects.for_tenant(tenant).filter(pk__in=list(pending_ids)).delete()


def put_off(*, tenant: Tenant, pending_ids: Sequence[Any], until: datetime) -> None:
    RulePending.objects.for_tenant(tenant).filter(pk__in=list(pending_ids)).update(not_before=until)


def claim(*, now: datetime, lease: timedelta, limit: int) -> tuple[Tenant, list[dict[str, Any]]] | None:
    """Lease up to `limit` ready entries of one tenant (the oldest waiting first) for `lease`; None: none is ready."""
    ready = RulePending.objects.unscoped().filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
    with transaction.atomic():
        first = ready.select_for_update(skip_locked=True).order_by("queued_at", "id").values("tenant_id").first()
        if first is None:
            return None
        rows = list(
            ready.filter(tenant_id=first["tenant_id"])
            .select_for_update(skip_locked=True)
            .order_by("queued_at", "id")
            .values("id", "message_id", "rule_id", "queued_at")[:limit]
        )
        RulePending.objects.unscoped().filter(pk__in=[r["id"] for r in rows]).update(not_before=now + lease)
        return Tenant.objects.get(pk=first["tenant_id"]), rows


def begin(*, tenant: Tenant, rule: Rule, matched: dict[Any, list[str]], now: datetime) -> set[Any]:
    """Record that the rule (at its version) acts on these messages; the ones recorded now (a message recorded
    before, by another run, is left out: it is acted on once). Inside the transaction of the actions."""
    ids = list(matched)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {RuleApplication._meta.db_table}
                (id, tenant_id, rule_id, rule_name, version, message_id, matched, actions, applied_at)
            SELECT gen_random_uuid(), %s, %s, %s, %s, m, w::jsonb, '[]'::jsonb, %s
            FROM unnest(%s::uuid[], %s::text[]) AS x(m, w)
            ON CONFLICT DO NOTHING RETURNING message_id""",  # noqa: S608 (the table's own name)
            [tenant.pk, rule.pk, rule.name, rule.version, now, ids, [json.dumps(matched[i]) for i in ids]],
        )
        return {row[0] for row in cursor.fetchall()}


def finish(*, tenant: Tenant, rule: Rule, outcomes: dict[Any, list[dict[str, str]]], now: datetime) -> None:
    """Each message's action outcomes, and on the rule its count and its last failing action."""
    if not outcomes:
        return
    ids = list(outcomes)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""UPDATE {RuleApplication._meta.db_table} a SET actions = x.o::jsonb
            FROM unnest(%s::uuid[], %s::text[]) AS x(m, o)
            WHERE a.tenant_id = %s AND a.rule_id = %s AND a.version = %s AND a.message_id = x.m""",  # noqa: S608
            [ids, [json.dumps(outcomes[i]) for i in ids], tenant.pk, rule.pk, rule.version],
        )
    failed = [a["outcome"] for done in outcomes.values() for a in done if a["outcome"] not in ("ok", "skipped")]
    changes: dict[str, Any] = {"applied_count": F("applied_count") + len(outcomes)}
    if failed:
        changes |= {"last_error": failed[-1][:40], "last_error_at": now}
    Rule.objects.for_tenant(tenant).filter(pk=rule.pk).update(**changes)
