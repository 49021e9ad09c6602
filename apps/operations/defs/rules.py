"""Rules: a person's standing instructions for new mail (SPEC §16's filters), per mailbox or per workspace, ordered.

A rule acts later, by itself, with the authority of its owner (the person who last confirmed what it does): each
action is a gate call as that person (apps.worker.rules), never more than they may do then. So every change of
what a rule does (creating, changing, enabling, applying, reordering, deleting) is confirmed, for persons and agents
alike, and an agent never slips one in: its call returns a proposal with what the rule would have done to the last
30 days of mail. `test_rule` answers that for any rule, saved or not, changing nothing; `apply_rule` queues the
existing mail a rule matches for the engine, which acts on it as on new mail (once per rule version).

What a rule says is the person's words, which the audit never records (only its name, version, how many
conditions, which actions); why it acted on a message is stored with the message (`applied_rules` in get_message),
in the rule's terms, never the mail's text.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from django.db.models import QuerySet
from pydantic import ConfigDict, Field, StringConstraints

from apps.accounts.models import User
from apps.core import words
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.mail.models import MailAccount, Message
from apps.mail.selectors import in_reach
from apps.operations import forwarding
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, Id, MailText
from apps.operations.registry import ALWAYS, Bound, Callers, Ceiling, OpClass, Preview, operation
from apps.operations.targets import account_of, reach
from apps.outbound import automations
from apps.outbound.models import Automation, AutomationState
from apps.rules import selectors, services
from apps.rules.conditions import Action, Condition, RuleBody, loaded
from apps.rules.engine import Decision, Loaded, decisions
from apps.rules.models import Rule
from apps.workspaces.models import DEFAULT_WORKSPACE, Workspace
from apps.workspaces.selectors import access_workspace_by_name

# a rule's name: at most the column's 100 characters (Text's 200 would fail in the database)
RuleName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]

# how far back a proposal looks for what the rule would have done
_PROPOSAL_DAYS = 30
_EXAMPLES = 3


class RuleOut(Closed):
    id: str
    name: str
    workspace: str
    account_id: str | None = Field(description="the one mailbox it covers; null: every mailbox of the workspace")
    position: int
    enabled: bool
    match: Literal["all", "any"]
    conditions: list[Condition]
    actions: list[Action]
    version: int = Field(description="grows with every change of what it does; a message is acted on once per version")
    owner: str = Field(description="the person whose authority it acts with (who last confirmed it)")
    stopped: str | None = Field(
        description="why it acts on nothing now: owner_left (its owner left the tenant) or owner_lost_workspace "
        "(its owner no longer reaches its workspace); a person confirming it again (update_rule) restarts it"
    )
    last_error: str | None = Field(description="the code of its last failing action (see get_rule's history)")
    last_error_at: datetime | None
    applied_count: int = Field(description="messages it acted on")
    forward_state: str | None = Field(
        default=None,
        description="a forwarding rule's approval: active (it forwards), awaiting_approval (it forwards nothing "
        "until a person approves it at approval_url), or null (it forwards nothing)",
    )
    forward_automation_id: str | None = Field(default=None, description="its forward, in list_automations")
    approval_url: str | None = None
    created_at: datetime
    updated_at: datetime


def _owner_name(user: User) -> str:
    return user.name or user.email


def _out(rule: Rule) -> RuleOut:
    body = loaded(rule.match, rule.conditions, rule.actions)
    # a forward waiting for approval first (what a person must act on), else the newest active
    forward = (
        Automation.objects.for_tenant(rule.tenant)
        .filter(rule=rule, state__in=(AutomationState.ACTIVE, AutomationState.AWAITING_APPROVAL))
        .order_by("state", "-created_at")
        .first()
        if body.forwards
        else None
    )
    waits = forward is not None and forward.state == AutomationState.AWAITING_APPROVAL
    return RuleOut(
        id=str(rule.pk),
        name=rule.name,
        workspace=rule.workspace.name,
        account_id=str(rule.account_id) if rule.account_id is not None else None,
        position=rule.position,
        enabled=rule.enabled,
        match=body.match,
        conditions=body.conditions,
        actions=body.actions,
        version=rule.version,
        owner=_owner_name(rule.owner),
        stopped=rule.stopped_reason or None,
        last_error=rule.last_error or None,
        last_error_at=rule.last_error_at,
        applied_count=rule.applied_count,
        forward_state=forward.state if forward is not None else None,
        forward_automation_id=str(forward.pk) if forward is not None else None,
        approval_url=automations.approval_url(forward.pk) if forward is not None and waits else None,
        created_at=rule.created_at,
        updated_at=rule.updated_at,
    )


def _person(ctx: Context) -> User:
    if ctx.caller.user is None:
        raise OakenError("FORBIDDEN", "a rule acts for a person")
    return ctx.caller.user


# ---------------------------------------------------------------- what a rule would do


@dataclass(frozen=True)
class Scope:
    workspace: Workspace
    account: MailAccount | None


@dataclass(frozen=True)
class Impact:
    scanned: int
    complete: bool  # every message of the period was read (not stopped at RULE_SCAN_MAX)
    matches: list[Decision]


def _messages(ctx: Context, scope: Scope, days: int) -> QuerySet[Message]:
    return selectors.recent_messages(
        reach(ctx),
        account_id=scope.account.pk if scope.account is not None else None,
        workspace_id=scope.workspace.pk,
        since=ctx.now - timedelta(days=days),
    )


def impact(ctx: Context, scope: Scope, body: RuleBody, days: int, *, rule: Rule | None = None) -> Impact:
    """Which messages of the last `days` the rule matches now, and why (at most RULE_SCAN_MAX read, newest first)."""
    cap = ctx.bounds.RULE_SCAN_MAX
    rows = _messages(ctx, scope, days)[: cap + 1]
    facts = selectors.facts_of(ctx.tenant, rows, [body])
    complete = len(facts) <= cap
    facts = facts[:cap]
    probe = rule or Rule(tenant=ctx.tenant, workspace=scope.workspace, account=scope.account)
    found = decisions([Loaded(probe, body)], facts, ctx.now)
    return Impact(len(facts), complete, found)


def _subjects(ctx: Context, decisions_: list[Decision]) -> dict[Any, str]:
    ids = [d.facts.id for d in decisions_]
    rows = Message.objects.for_tenant(ctx.tenant).filter(pk__in=ids).values_list("pk", "subject")
    return dict(rows)


def _proposal(ctx: Context, title: str, verb: str, what: str, scope: Scope, body: RuleBody) -> Preview:
    """What confirming would set going: the rule's effect on the last 30 days, with up to three examples (by
    subject for a person's dialog; by message id for an agent, whose answer never holds unfenced mail text)."""
    found = impact(ctx, scope, body, _PROPOSAL_DAYS)
    examples = found.matches[:_EXAMPLES]
    more = "" if found.complete else f" (of the newest {found.scanned} read)"
    summary = (
        f"{what} In the last {_PROPOSAL_DAYS} days it would have acted on "
        f"{words.count(len(found.matches), 'message')}{more}. It acts on new mail as you, with what you may do then."
    )
    if body.forwards:
        who = (
            "once you confirm"
            if ctx.caller.principal == "person"
            else "once a person approves it on the Automations page (nothing is forwarded before)"
        )
        summary += (
            f" It forwards each message it matches to {', '.join(body.forwards)}, by itself, on your authority, {who}; "
            "mail Oaken forwarded already is never forwarded again."
        )
    lines: tuple[str, ...] = ()
    if ctx.caller.principal == "person":
        subjects = _subjects(ctx, examples)
        lines = tuple(f"For example: {subjects.get(d.facts.id) or '(no subject)'}" for d in examples)
    changes = tuple(Change(str(d.facts.id), None, {"would_match": d.matched}) for d in examples)
    return Preview(
        changes or (Change("rule", None, {"would_match": []}),), summary=summary, title=title, verb=verb, lines=lines
    )


# ---------------------------------------------------------------- list_rules / get_rule


class ListRulesIn(Closed):
    workspace: str | None = Field(default=None, max_length=100, description="only this workspace's rules")


class RulesOut(Closed):
    rules: list[RuleOut]


@operation(
    name="list_rules",
    summary="The rules of the workspaces you reach, in the order they run (per workspace), each with whether it "
    "runs, whose authority it acts with, and how often it acted.",
    input=ListRulesIn,
    output=RulesOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
)
def list_rules(ctx: Context, data: ListRulesIn) -> RulesOut:
    """At most RULES_MAX rules a workspace."""
    rules = selectors.rules_in_reach(reach(ctx))
    if data.workspace is not None:
        rules = rules.filter(workspace__name=data.workspace)
    return RulesOut(rules=[_out(r) for r in rules[: ctx.bounds.RULES_MAX * 10]])


class RuleIn(Closed):
    rule_id: Id


class HistoryIn(RuleIn):
    history: int = Field(default=20, ge=0, le=100, description="how many of its last actions to list")


class Applied(Closed):
    message_id: str | None = Field(description="null when the message is gone")
    subject: MailText | None
    version: int
    matched: list[str] = Field(description="the conditions that held, in the rule's terms")
    actions: list[dict[str, str]] = Field(description="each action and its outcome: ok, skipped, or a refusal code")
    applied_at: datetime


class RuleDetailOut(RuleOut):
    history: list[Applied]


def _the_rule(ctx: Context, data: RuleIn) -> Rule:
    return selectors.access_rule_by_id(data.rule_id, reach=reach(ctx))


@operation(
    name="get_rule",
    summary="One rule, with what it did last: each message it acted on, the conditions that held and each action's "
    "outcome.",
    input=HistoryIn,
    output=RuleDetailOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    targets=_the_rule,
    returns_mail=True,
)
def get_rule(ctx: Context, data: HistoryIn) -> RuleDetailOut:
    rule: Rule = ctx.targets
    history = [
        Applied(
            message_id=str(a.message_id),
            subject=a.message.subject,
            version=a.version,
            matched=a.matched,
            actions=a.actions,
            applied_at=a.applied_at,
        )
        for a in selectors.history(rule, data.history)
    ]
    return RuleDetailOut(**_out(rule).model_dump(), history=history)


# ---------------------------------------------------------------- create_rule


class ScopeIn(Closed):
    workspace: str = Field(default=DEFAULT_WORKSPACE, min_length=1, max_length=100)
    account_id: Id | None = Field(default=None, description="one mailbox of the workspace; left out: every mailbox")


def _scope(ctx: Context, data: ScopeIn) -> Scope:
    if data.account_id is not None:
        account = account_of(ctx, data.account_id)
        if "workspace" in data.model_fields_set and account.workspace.name != data.workspace:
            raise OakenError.invalid("account_id", "is a mailbox of another workspace than the one named")
        return Scope(account.workspace, account)
    in_reach(reach(ctx), data.workspace, "workspace")
    return Scope(access_workspace_by_name(tenant=ctx.tenant, name=data.workspace), None)


class CreateRuleIn(ScopeIn, RuleBody):
    # a rule that forwards names its mailbox (it sends from it): published with the input
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": ["account_id"], "properties": {"account_id": {"type": "string"}}},
                {
                    "properties": {
                        "actions": {
                            "items": {"not": {"required": ["action"], "properties": {"action": {"const": "forward"}}}}
                        }
                    }
                },
            ]
        }
    )
    name: RuleName
    enabled: bool = True


@dataclass(frozen=True)
class Creating:
    scope: Scope
    body: RuleBody


def _creating(ctx: Context, data: CreateRuleIn) -> Creating:
    scope = _scope(ctx, data)
    body = RuleBody(match=data.match, conditions=data.conditions, actions=data.actions)
    return Creating(scope, forwarding.checked(ctx, scope.workspace, scope.account, body))


def _create_preview(ctx: Context, data: CreateRuleIn) -> Preview:
    scope = ctx.targets.scope
    where = (
        f"every mailbox of {words.named(scope.workspace.name)}"
        if scope.account is None
        else words.named(scope.account.name)
    )
    return _proposal(
        ctx,
        "Create this rule?",
        "Create rule",
        f"Create the rule {words.named(data.name)} for {where}.",
        scope,
        ctx.targets.body,
    )


@operation(
    name="create_rule",
    summary="Create a rule for a mailbox or a workspace: conditions (all or any) and actions, run on new mail as you. "
    "Always confirmed; the proposal says what it would have done to the last 30 days of mail.",
    input=CreateRuleIn,
    output=RuleOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_create_preview,
    confirm=ALWAYS,
    targets=_creating,
)
def create_rule(ctx: Context, data: CreateRuleIn) -> RuleOut:
    creating: Creating = ctx.targets
    rule = services.create_rule(
        act=ctx,
        owner=_person(ctx),
        workspace=creating.scope.workspace,
        account=creating.scope.account,
        name=data.name,
        body=creating.body,
        enabled=data.enabled,
        limit=ctx.bounds.RULES_MAX,
    )
    forwarding.bind(ctx, rule)
    return _out(rule)


# ---------------------------------------------------------------- update_rule


class UpdateRuleIn(RuleIn):
    name: RuleName | None = None
    enabled: bool | None = None
    match: Literal["all", "any"] | None = None
    conditions: list[Condition] | None = Field(default=None, min_length=1, max_length=20)
    actions: list[Action] | None = Field(default=None, min_length=1, max_length=10)


def _new_body(rule: Rule, data: UpdateRuleIn) -> RuleBody | None:
    if data.match is None and data.conditions is None and data.actions is None:
        return None
    now = loaded(rule.match, rule.conditions, rule.actions)
    return RuleBody(
        match=data.match or now.match,
        conditions=data.conditions if data.conditions is not None else now.conditions,
        actions=data.actions if data.actions is not None else now.actions,
    )


def _guarded(ctx: Context, rule: Rule) -> Rule:
    """A forwarding rule changes only with the send permission (what it is decides what is sent)."""
    forwarding.guard(ctx, forwarding.forwarding([rule]), "this")
    return rule


@dataclass(frozen=True)
class Updating:
    rule: Rule
    body: RuleBody | None


def _updating(ctx: Context, data: UpdateRuleIn) -> Updating:
    rule = _guarded(ctx, _the_rule(ctx, data))
    body = _new_body(rule, data)
    if body is not None:
        body = forwarding.checked(ctx, rule.workspace, rule.account, body)
    return Updating(rule, body)


def _update_preview(ctx: Context, data: UpdateRuleIn) -> Preview:
    updating: Updating = ctx.targets
    rule = updating.rule
    body = updating.body or loaded(rule.match, rule.conditions, rule.actions)
    enabled = rule.enabled if data.enabled is None else data.enabled
    what = f"Change the rule {words.named(rule.name)}" + ("" if enabled else " (off: it acts on nothing)") + "."
    return _proposal(ctx, "Change this rule?", "Change rule", what, Scope(rule.workspace, rule.account), body)


@operation(
    name="update_rule",
    summary="Change a rule: its name, match, conditions, actions, or whether it runs (what you leave out stays). A "
    "change of what it does is a new version, acting with the authority of whoever confirms it. Always confirmed.",
    input=UpdateRuleIn,
    output=RuleOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_update_preview,
    confirm=ALWAYS,
    targets=_updating,
)
def update_rule(ctx: Context, data: UpdateRuleIn) -> RuleOut:
    updating: Updating = ctx.targets
    rule = services.update_rule(
        act=ctx, rule=updating.rule, owner=_person(ctx), name=data.name, body=updating.body, enabled=data.enabled
    )
    forwarding.bind(ctx, rule)
    return _out(rule)


# ---------------------------------------------------------------- delete_rule


class RuleDeletedOut(Closed):
    rule_id: str
    deleted: bool


def _deleting(ctx: Context, data: RuleIn) -> Rule:
    return _guarded(ctx, _the_rule(ctx, data))


def _delete_preview(ctx: Context, data: RuleIn) -> Preview:
    rule: Rule = ctx.targets
    return Preview(
        (Change(str(rule.pk), services.rule_state(rule), None),),
        summary=f"Delete the rule {words.named(rule.name)}: it acts on no new mail. What it did stays done, and the "
        "messages it acted on still say why." + forwarding.changes(forwarding.forwarding([rule])),
        title="Delete this rule?",
        verb="Delete rule",
    )


@operation(
    name="delete_rule",
    summary="Delete a rule (what it did stays done and explained). Always confirmed.",
    input=RuleIn,
    output=RuleDeletedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_delete_preview,
    confirm=ALWAYS,
    targets=_deleting,
)
def delete_rule(ctx: Context, data: RuleIn) -> RuleDeletedOut:
    rule: Rule = ctx.targets
    forwarding.end(ctx, rule)
    services.delete_rule(act=ctx, rule=rule)
    return RuleDeletedOut(rule_id=data.rule_id, deleted=True)


# ---------------------------------------------------------------- reorder_rules


class ReorderIn(Closed):
    workspace: str = Field(default=DEFAULT_WORKSPACE, min_length=1, max_length=100)
    rule_ids: list[Id] = Field(
        min_length=1,
        max_length=1000,
        json_schema_extra={"uniqueItems": True},
        description="rules of the workspace in their new order, each once; the rules left out keep their order, "
        "after these",
    )


def _reordered(ctx: Context, data: ReorderIn) -> list[Rule]:
    in_reach(reach(ctx), data.workspace, "workspace")
    workspace = access_workspace_by_name(tenant=ctx.tenant, name=data.workspace)
    if len(set(data.rule_ids)) != len(data.rule_ids):
        raise OakenError.invalid("rule_ids", "names a rule twice")
    rules = list(Rule.objects.for_tenant(ctx.tenant).filter(workspace=workspace).order_by("position", "created_at"))
    by_id = {str(r.pk): r for r in rules}
    if any(i not in by_id for i in data.rule_ids):
        raise OakenError.not_found("rule_ids")
    # the order decides which rules' stop comes before a forwarding rule: what it sends
    forwarding.guard(ctx, forwarding.forwarding(rules), "reordering the rules")
    named = set(data.rule_ids)
    return [by_id[i] for i in data.rule_ids] + [r for r in rules if str(r.pk) not in named]


def _reorder_preview(ctx: Context, data: ReorderIn) -> Preview:
    rules: list[Rule] = ctx.targets
    changes = tuple(
        Change(str(r.pk), {"position": r.position}, {"position": i}) for i, r in enumerate(rules) if r.position != i
    )
    return Preview(
        changes,
        summary=f"Run the rules of {words.named(data.workspace)} in this order: "
        + ", ".join(words.named(r.name) for r in rules)
        + ". A rule that stops processing stops the ones after it.",
        title="Reorder these rules?",
        verb="Reorder",
    )


class ReorderedOut(Closed):
    rule_ids: list[str]


@operation(
    name="reorder_rules",
    summary="Put a workspace's rules in a new order (the order they run in; a rule that says stop ends it). Always "
    "confirmed.",
    input=ReorderIn,
    output=ReorderedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_reorder_preview,
    confirm=ALWAYS,
    targets=_reordered,
)
def reorder_rules(ctx: Context, data: ReorderIn) -> ReorderedOut:
    rules: list[Rule] = ctx.targets
    services.reorder_rules(act=ctx, rules=rules)
    return ReorderedOut(rule_ids=[str(r.pk) for r in rules])


# ---------------------------------------------------------------- test_rule


_DAYS_BOUND = Bound("days", "RULE_DAYS_MAX", "{field}: looks back at most {maximum} days (RULE_DAYS_MAX)")


class TestRuleIn(ScopeIn):
    # a saved rule, or conditions and actions given here: one of the two, published with the input
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {
                    "required": ["rule_id"],
                    "properties": {"rule_id": {"type": "string"}},
                    "not": {"anyOf": [{"required": ["conditions"]}, {"required": ["actions"]}]},
                },
                {
                    "required": ["conditions", "actions"],
                    "properties": {"conditions": {"type": "array"}, "actions": {"type": "array"}},
                    "not": {"required": ["rule_id"]},
                },
            ]
        }
    )
    rule_id: Id | None = Field(default=None, description="a saved rule; or leave it out and give the rule here")
    match: Literal["all", "any"] = "all"
    conditions: list[Condition] | None = Field(default=None, min_length=1, max_length=20)
    actions: list[Action] | None = Field(default=None, min_length=1, max_length=10)
    days: int = Field(default=30, ge=1, le=3650, description="how far back to look (at most RULE_DAYS_MAX)")
    limit: int = Field(default=20, ge=0, le=100, description="how many matches to list")


class Match(Closed):
    message_id: str
    subject: MailText
    sender: MailText
    date: datetime | None
    why: list[str] = Field(description="the conditions that held, in the rule's terms")


class TestedOut(Closed):
    scanned: int = Field(description="messages read: the newest of the period, at most RULE_SCAN_MAX")
    complete: bool = Field(description="every message of the period was read")
    matched: int
    message_ids: list[str] = Field(description="every message it matched (of those read)")
    matches: list[Match] = Field(description="the newest `limit` of them, with why")


@dataclass(frozen=True)
class Tested:
    scope: Scope
    body: RuleBody
    rule: Rule | None


def _tested(ctx: Context, data: TestRuleIn) -> Tested:
    if data.rule_id is not None:
        if data.conditions is not None or data.actions is not None:
            raise OakenError.invalid("rule_id", "give a saved rule or conditions and actions, not both")
        rule = selectors.access_rule_by_id(data.rule_id, reach=reach(ctx))
        return Tested(Scope(rule.workspace, rule.account), loaded(rule.match, rule.conditions, rule.actions), rule)
    if data.conditions is None or data.actions is None:
        raise OakenError.invalid("conditions", "is required (with actions) when no rule_id is given")
    return Tested(_scope(ctx, data), RuleBody(match=data.match, conditions=data.conditions, actions=data.actions), None)


@operation(
    name="test_rule",
    summary="Try a rule (saved, or given here) on past mail: which messages of a period it matches and why. Changes "
    "nothing.",
    input=TestRuleIn,
    output=TestedOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    targets=_tested,
    bounds=(_DAYS_BOUND,),
    returns_mail=True,
)
def test_rule(ctx: Context, data: TestRuleIn) -> TestedOut:
    tested: Tested = ctx.targets
    found = impact(ctx, tested.scope, tested.body, data.days, rule=tested.rule)
    shown = found.matches[: data.limit]
    rows = {
        r["pk"]: r
        for r in Message.objects.for_tenant(ctx.tenant)
        .filter(pk__in=[d.facts.id for d in shown])
        .values("pk", "subject", "sender_address", "date")
    }
    return TestedOut(
        scanned=found.scanned,
        complete=found.complete,
        matched=len(found.matches),
        message_ids=[str(d.facts.id) for d in found.matches],
        matches=[
            Match(
                message_id=str(d.facts.id),
                subject=rows[d.facts.id]["subject"],
                sender=rows[d.facts.id]["sender_address"],
                date=rows[d.facts.id]["date"],
                why=d.matched,
            )
            for d in shown
        ],
    )


# ---------------------------------------------------------------- apply_rule


class ApplyRuleIn(RuleIn):
    days: int = Field(default=30, ge=1, le=3650, description="the mail of how many days back (at most RULE_DAYS_MAX)")


class AppliedOut(Closed):
    rule_id: str
    queued: int = Field(
        description="messages it matched, now waiting for it (acted on within seconds, in the order "
        "of its actions; each at most once per rule version)"
    )


def _to_apply(ctx: Context, data: ApplyRuleIn) -> tuple[Rule, Impact]:
    rule = _guarded(ctx, selectors.access_rule_by_id(data.rule_id, reach=reach(ctx)))
    if rule.stopped_reason:
        raise OakenError("CONFLICT", "the rule is stopped: a person confirms it again first (update_rule)")
    body = loaded(rule.match, rule.conditions, rule.actions)
    return rule, impact(ctx, Scope(rule.workspace, rule.account), body, data.days, rule=rule)


def _apply_preview(ctx: Context, data: ApplyRuleIn) -> Preview:
    rule, found = ctx.targets
    more = "" if found.complete else f" (of the newest {found.scanned}: run it again for older mail)"
    return Preview(
        tuple(Change(str(d.facts.id), None, {"rule": rule.name, "why": d.matched}) for d in found.matches),
        summary=f"Apply the rule {words.named(rule.name)} to the {words.count(len(found.matches), 'message')} of the "
        f"last {data.days} days it matches{more}, as its owner {_owner_name(rule.owner)}. Each is acted on once.",
        title="Apply this rule to existing mail?",
        verb="Apply rule",
    )


@operation(
    name="apply_rule",
    summary="Run a rule on existing mail of a period: the messages it matches now are acted on (once per rule "
    "version), as the rule's owner. Always confirmed; the proposal counts them.",
    input=ApplyRuleIn,
    output=AppliedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.ON,
    preview=_apply_preview,
    confirm=ALWAYS,
    targets=_to_apply,
    bounds=(_DAYS_BOUND,),
)
def apply_rule(ctx: Context, data: ApplyRuleIn) -> AppliedOut:
    rule, found = ctx.targets
    queued = services.queue_for_rule(act=ctx, rule=rule, message_ids=[d.facts.id for d in found.matches])
    return AppliedOut(rule_id=str(rule.pk), queued=queued)


# ---------------------------------------------------------------- stop_rule (the engine's)


class StopIn(RuleIn):
    reason: Literal["owner_left", "owner_lost_workspace"]


class StoppedOut(Closed):
    rule_id: str
    stopped: str


@operation(
    name="stop_rule",
    summary="The rules engine stops a rule whose owner lost the authority it acts with (left the tenant, or no "
    "longer reaches its workspace); it shows as stopped until a person confirms it again.",
    input=StopIn,
    output=StoppedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    callers=Callers.INTERNAL,
    targets=_the_rule,
)
def stop_rule(ctx: Context, data: StopIn) -> StoppedOut:
    rule: Rule = ctx.targets
    if not services.stop_rule(act=ctx, rule=rule, reason=data.reason):
        raise OakenError("CONFLICT", "the rule is stopped already")
    return StoppedOut(rule_id=str(rule.pk), stopped=data.reason)
