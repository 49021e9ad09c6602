"""Reads of rules, in the caller's reach: a rule of a workspace the caller does not reach is OUT_OF_SCOPE, another
tenant's (or none) NOT_FOUND; and the facts a rule tests, loaded for many messages at once."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.mail.models import Attachment, Label, Message, MessageLabel
from apps.mail.selectors import Reach, in_reach
from apps.rules.conditions import AboutCondition, AttachmentCondition, Facts, RuleBody, TextCondition
from apps.rules.models import Rule, RuleApplication
from apps.search.similarity import nearness
from apps.workspaces.models import Tenant


def rules_in_reach(reach: Reach) -> QuerySet[Rule]:
    """The rules of the workspaces the caller reaches, in order (workspace, then position)."""
    rules = Rule.objects.for_tenant(reach.tenant).select_related("workspace", "account", "owner")
    if reach.workspaces is not None:
        rules = rules.filter(workspace__name__in=reach.workspaces)
    return rules.order_by("workspace__name", "position", "created_at", "id")


def access_rule_by_id(rule_id: str, *, reach: Reach, field: str = "rule_id") -> Rule:
    found = (
        Rule.objects.for_tenant(reach.tenant)
        .select_related("workspace", "account", "owner")
        .filter(pk=parse_id(rule_id, field))
        .first()
    )
    if found is None:
        raise OakenError.not_found(field)
    in_reach(reach, found.workspace.name, field)
    return found


def rules_by_ids(*, tenant: Tenant, ids: set[Any]) -> list[Rule]:
    """The tenant's rules among these ids (the audit log names them)."""
    return list(Rule.objects.for_tenant(tenant).filter(pk__in=ids).only("id", "name")) if ids else []


def history(rule: Rule, limit: int) -> list[RuleApplication]:
    """What the rule did last, newest first."""
    rows = RuleApplication.objects.for_tenant(rule.tenant).filter(rule=rule).select_related("message")
    return list(rows.order_by("-applied_at", "-id")[:limit])


def applied_to(tenant: Tenant, message_id: Any) -> list[RuleApplication]:
    """Why rules acted on a message: each rule's application, oldest first."""
    rows = RuleApplication.objects.for_tenant(tenant).filter(message_id=message_id)
    return list(rows.order_by("applied_at", "id"))


def already_applied(
    tenant: Tenant, pairs: Sequence[tuple[Any, int]], message_ids: Sequence[Any]
) -> set[tuple[Any, Any]]:
    """(rule id, message id) of these messages that these rules (at these versions) acted on already."""
    if not pairs or not message_ids:
        return set()
    versions = dict(pairs)
    rows = RuleApplication.objects.for_tenant(tenant).filter(
        rule_id__in=list(versions), message_id__in=list(message_ids)
    )
    return {
        (rule_id, message_id)
        for rule_id, version, message_id in rows.values_list("rule_id", "version", "message_id")
        if versions.get(rule_id) == version
    }


# ---------------------------------------------------------------- facts


def _needs(bodies: Sequence[RuleBody]) -> tuple[bool, bool, set[str]]:
    body = attachments = False
    abouts: set[str] = set()
    for b in bodies:
        for c in b.conditions:
            body |= isinstance(c, TextCondition) and c.field == "body"
            attachments |= isinstance(c, AttachmentCondition)
            if isinstance(c, AboutCondition):
                abouts.add(c.text)
    return body, attachments, abouts


def facts_of(tenant: Tenant, messages: QuerySet[Message], bodies: Sequence[RuleBody]) -> list[Facts]:
    """What these rules test of each message: one query for the messages (the body only when a rule reads it), one
    for attachments when a rule tests them, and one per "about" description."""
    wants_body, wants_attachments, abouts = _needs(bodies)
    fields = [
        "id",
        "account_id",
        "account__workspace_id",
        "sender_address",
        "sender_name",
        "to_addresses",
        "cc_addresses",
        "subject",
        "headers",
        "folder__kind",
        "folder__name",
        "date",
        "has_attachments",
    ]
    if wants_body:
        fields.append("text_body")
    rows = list(messages.values(*fields))
    if not rows:
        return []
    files: dict[Any, list[tuple[str, str]]] = {}
    if wants_attachments:
        with_files = [r["id"] for r in rows if r["has_attachments"]]
        found = Attachment.objects.for_tenant(tenant).filter(message_id__in=with_files)
        for message_id, content_type, filename in found.values_list("message_id", "content_type", "filename"):
            files.setdefault(message_id, []).append((content_type, filename))
    carried: dict[Any, dict[str, str]] = {}
    wanted_labels = {i for b in bodies for i in b.label_ids()}
    if wanted_labels:
        carried = labels_carried(tenant, [r["id"] for r in rows], wanted_labels)
    near: dict[str, dict[Any, float]] = {}
    if abouts:
        ids = [r["id"] for r in rows]
        near = nearness(tenant, ids, sorted(abouts))
    return [
        Facts(
            id=r["id"],
            account_id=r["account_id"],
            workspace_id=r["account__workspace_id"],
            sender_address=r["sender_address"],
            sender_name=r["sender_name"],
            recipients=[(p.get("address", ""), p.get("name", "")) for p in [*r["to_addresses"], *r["cc_addresses"]]],
            subject=r["subject"],
            body=r.get("text_body", ""),
            headers=r["headers"] or {},
            folder_kind=r["folder__kind"],
            folder_name=r["folder__name"],
            date=r["date"],
            attachments=files.get(r["id"], []),
            nearness={text: scores[r["id"]] for text, scores in near.items() if r["id"] in scores},
            labels=carried.get(r["id"], {}),
        )
        for r in rows
    ]


def labels_carried(tenant: Tenant, message_ids: Sequence[Any], label_ids: set[str]) -> dict[Any, dict[str, str]]:
    """Which of these labels each message carries: message id to {label id (text): name}."""
    ids = [parse_id(i, "label_id") for i in label_ids if _is_id(i)]
    if not ids:
        return {}
    rows = MessageLabel.objects.for_tenant(tenant).filter(message_id__in=list(message_ids), label_id__in=ids)
    found: dict[Any, dict[str, str]] = {}
    for message_id, label_id, name in rows.values_list("message_id", "label_id", "label__name"):
        found.setdefault(message_id, {})[str(label_id)] = name
    return found


def _is_id(value: str) -> bool:
    try:
        parse_id(value, "label_id")
    except OakenError:
        return False
    return True


def labels_named(tenant: Tenant, label_ids: set[str]) -> dict[str, Label]:
    """The tenant's labels among these ids (a rule's label conditions), by id as text."""
    ids = [parse_id(i, "label_id") for i in label_ids if _is_id(i)]
    rows = Label.objects.for_tenant(tenant).filter(pk__in=ids).select_related("account") if ids else []
    return {str(label.pk): label for label in rows}


def recent_messages(reach: Reach, *, account_id: Any, workspace_id: Any, since: datetime) -> QuerySet[Message]:
    """The incoming mail a rule of this scope covers (not Sent or Drafts), dated since `since`, newest first."""
    rows = Message.objects.for_tenant(reach.tenant).filter(date__gte=since).exclude(folder__kind__in=("sent", "drafts"))
    rows = (
        rows.filter(account_id=account_id)
        if account_id is not None
        else rows.filter(account__workspace_id=workspace_id)
    )
    return rows.order_by("-date", "-id")


def applied_column(tenant_column: str, message_column: str) -> str:
    """Why rules acted on a message, as a column of another statement (get_message reads the message and this in
    one round trip): a JSON list, oldest first, of each rule's id (null once deleted), name, version, the conditions
    that held and each action with its outcome."""
    table, rules = RuleApplication._meta.db_table, Rule._meta.db_table
    return f"""(SELECT coalesce(json_agg(json_build_object(
        'rule_id', x.rule_id, 'rule', coalesce(r.name, x.rule_name), 'version', x.version, 'matched', x.matched,
        'actions', x.actions, 'applied_at', x.applied_at) ORDER BY x.applied_at, x.id), '[]'::json)
      FROM {table} x LEFT JOIN {rules} r ON r.id = x.rule_id
      WHERE x.tenant_id = {tenant_column} AND x.message_id = {message_column})"""  # noqa: S608 (column names only)


def rules_in(*, tenant: Tenant, ids: set[Any]) -> dict[str, Rule]:
    """The tenant's rules among these ids, whole, by id (what undo_agent_actions compares with the audit)."""
    return {str(r.pk): r for r in Rule.objects.for_tenant(tenant).filter(pk__in=ids)} if ids else {}
