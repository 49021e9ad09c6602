"""Forwarding rules (issue 40): a rule's `forward` action is a standing send, bound as an automatic reply is.

A rule that forwards holds an automation (apps.outbound.automations, kind forward, `rule` set) whose content hash
covers the destination and the rule's *terms*: its match, its conditions and the description version of each label
they name. The rules engine decides which messages match (apps.worker.rules); each match is sent only while the
rule's active automation has exactly the hash of what the rule is now, on the authority of the person who approved
it. A person confirming a forwarding rule approves it as they confirm; an agent's change leaves it waiting for a
person on /automations, and the forward it replaces ends at once.

Dependencies are authority. What decides what a forwarding rule sends is a change to that send behaviour: the rule
itself (changed, renamed, applied, deleted, or reordered among the rules before it) and each label its conditions
name (its description, its name, its deletion, and the hand-labelled examples an AI label learns from). Each of
those calls needs the send permission (`require_send`: INSUFFICIENT_SCOPE naming the rule, for an agent without
it), and a person's confirmation names the forwarding rule it changes (`changes`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from django.db.models import Q

from apps.audit.log import canonical_json
from apps.core import words
from apps.core.errors import OakenError
from apps.core.kinds import Principal
from apps.mail.models import Label, MailAccount
from apps.mail.selectors import access_labels_by_ids
from apps.operations.context import Context
from apps.operations.exposure import is_permitted, refusal
from apps.operations.registry import Operation, registry
from apps.operations.targets import reach
from apps.outbound import automations
from apps.outbound.compose import normalize_address
from apps.outbound.models import Automation, AutomationKind, AutomationState
from apps.rules.conditions import ForwardAction, RuleBody, loaded
from apps.rules.models import Rule
from apps.rules.selectors import labels_named
from apps.workspaces.models import Tenant, Workspace

# the operation whose authority a forward needs (send scope, its role)
_SEND_AUTHORITY = "set_forwarding"
_LIVE = (AutomationState.ACTIVE, AutomationState.AWAITING_APPROVAL)


def _send_authority() -> Operation:
    op = registry.get(_SEND_AUTHORITY)
    assert op is not None
    return op


def may_send(ctx: Context) -> bool:
    """Whether the caller could set up a forward itself."""
    return is_permitted(ctx.caller, _send_authority())


def require_send(ctx: Context, because: str) -> None:
    """Refuse a caller who could not set up a forward itself (an agent without send: INSUFFICIENT_SCOPE)."""
    if not may_send(ctx):
        raise refusal(ctx.caller, _send_authority(), because=because)


def checked(ctx: Context, workspace: Workspace, account: MailAccount | None, body: RuleBody) -> RuleBody:
    """The rule's body as it is stored: a forward needs the send permission and a rule of one mailbox, goes to an
    address (normalized, not the mailbox's own); a label condition names a label of the rule's mailbox (or, for a
    workspace's rule, of one of its mailboxes)."""
    if body.forwards:
        require_send(ctx, "a rule that forwards mail sends by itself")
        if account is None:
            raise OakenError.invalid("account_id", "is required for a rule that forwards (it sends from one mailbox)")
        actions = []
        for index, action in enumerate(body.actions):
            if isinstance(action, ForwardAction):
                to = normalize_address(action.to, f"actions.{index}.to")
                if to.casefold() == account.email_address.casefold():
                    raise OakenError.invalid(f"actions.{index}.to", "is this mailbox's own address")
                action = ForwardAction(action="forward", to=to)
            actions.append(action)
        body = body.model_copy(update={"actions": actions})
    named = sorted(body.label_ids())
    for label in access_labels_by_ids(named, reach=reach(ctx), field="conditions") if named else []:
        mailbox = label.account_id == account.pk if account is not None else label.account.workspace_id == workspace.pk
        if not mailbox:
            raise OakenError.invalid("conditions", "names a label of another mailbox than the rule's")
    return body


def terms(tenant: Tenant, body: RuleBody) -> str:
    """What decides which messages a forwarding rule sends, as the approval binds it."""
    labels = labels_named(tenant, body.label_ids())
    return canonical_json(
        {
            "match": body.match,
            "conditions": [c.model_dump(mode="json") for c in body.conditions],
            "labels": {i: labels[i].description_version if i in labels else None for i in sorted(body.label_ids())},
        }
    )


def contents_for(rule: Rule, body: RuleBody | None = None) -> list[automations.AutomationContent]:
    """The forwards the rule holds now: one per destination (none: it forwards nothing)."""
    body = body or loaded(rule.match, rule.conditions, rule.actions)
    if rule.account is None:
        return []
    rule_terms = terms(rule.tenant, body) if body.forwards else ""
    return [
        automations.AutomationContent(
            account=rule.account, kind=AutomationKind.FORWARD, forward_to=to, rule_id=rule.pk, terms=rule_terms
        )
        for to in body.forwards
    ]


def bind(ctx: Context, rule: Rule) -> None:
    """After a change of the rule (or of a label it names): the rule's forwards that are no longer what it is end;
    what it forwards now is approved when a person confirmed it, else waits for a person's approval."""
    wanted = {c.digest(): c for c in contents_for(rule)}
    kept: dict[str, Automation] = {}
    for automation in Automation.objects.for_tenant(ctx.tenant).filter(rule=rule, state__in=_LIVE):
        if automation.content_hash in wanted and automation.content_hash not in kept:
            kept[automation.content_hash] = automation
            continue
        automations.cancel(automation, act=ctx, reason="rule_changed")
    for digest, content in wanted.items():
        automation = kept.get(digest)
        if automation is None:
            automations.request_automation(content, act=ctx)
        elif automation.state == AutomationState.AWAITING_APPROVAL and ctx.caller.principal == Principal.PERSON:
            automations.approve(automation, act=ctx, content_hash=digest)


def end(ctx: Context, rule: Rule) -> None:
    """The rule is going: what it forwards ends with it."""
    for automation in Automation.objects.for_tenant(ctx.tenant).filter(rule=rule, state__in=_LIVE):
        automations.cancel(automation, act=ctx, reason="rule_deleted")


def forwarding(rules: Iterable[Rule]) -> list[Rule]:
    return [r for r in rules if any(a.get("action") == "forward" for a in r.actions or ())]


def using_labels(tenant: Tenant, labels: Sequence[Label]) -> list[Rule]:
    """The forwarding rules whose conditions name any of these labels."""
    if not labels:
        return []
    naming = Q()
    for label in labels:
        naming |= Q(conditions__contains=[{"field": "label", "label_id": str(label.pk)}])
    rows = Rule.objects.for_tenant(tenant).filter(naming, actions__contains=[{"action": "forward"}])
    return list(rows.select_related("account", "workspace").order_by("position", "id"))


def guard_labels(ctx: Context, labels: Sequence[Label], doing: str) -> list[Rule]:
    """`doing` to these labels changes the forwarding rules that name them: only with the send permission. The
    rules, for a person's confirmation to name."""
    rules = using_labels(ctx.tenant, labels)
    guard(ctx, rules, doing)
    return rules


def guard(ctx: Context, rules: Sequence[Rule], doing: str) -> None:
    """`doing` changes what these forwarding rules send: only with the send permission."""
    if rules:
        require_send(ctx, f"{doing} changes what the forwarding rule {words.named(rules[0].name)} sends")


def changes(rules: Sequence[Rule]) -> str:
    """A sentence for a person's confirmation: which send behaviours this changes."""
    if not rules:
        return ""
    named = ", ".join(f"{words.named(r.name)} (to {_destination(r)})" for r in rules)
    return f" This changes what the forwarding rule{'s' if len(rules) > 1 else ''} {named} sends."


def _destination(rule: Rule) -> str:
    return ", ".join(loaded(rule.match, rule.conditions, rule.actions).forwards)


def conditions_of(terms_json: str) -> tuple[str, list[dict[str, object]]]:
    """An automation's terms as a person reads them: the match and the conditions."""
    if not terms_json:
        return "", []
    parsed = json.loads(terms_json)
    return str(parsed.get("match", "")), list(parsed.get("conditions", []))
