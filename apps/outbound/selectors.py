"""Reads of drafts, outbound requests and send policies, always within the caller's reach (SPEC §8, §10).

As for mail: another tenant's id, or a malformed one, is NOT_FOUND exactly like a missing one; a draft in a
workspace the caller was not granted is OUT_OF_SCOPE. Requests and policies are a person's own (an ADMIN sees
the tenant's); an agent sees only the requests made through its own credential, in accounts it reaches.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable
from datetime import datetime
from typing import Any, NamedTuple

from django.db.models import CharField, Exists, OuterRef, Q, QuerySet
from django.db.models.functions import Cast, Length

from apps.accounts.models import Signature
from apps.agents.models import ApiKey, Connection
from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.core.kinds import Principal
from apps.mail.models import Attachment, MailAccount, Message
from apps.mail.selectors import Reach, StoredFile, access_account_by_id, stored_file
from apps.outbound.execution import retry_times
from apps.outbound.models import (
    CANCELLABLE,
    Automation,
    BudgetUsage,
    Draft,
    OutboundAttachment,
    OutboundRequest,
    SendPolicy,
    State,
)
from apps.workspaces.models import Tenant

# the states of a request that is still to be sent (or being sent): its draft is not edited by an agent meanwhile
OPEN_STATES = (State.REQUESTED, State.AWAITING_APPROVAL, State.APPROVED, State.QUEUED, State.SENDING)


def drafts_in_reach(*, reach: Reach) -> QuerySet[Draft]:
    return Draft.objects.for_tenant(reach.tenant).filter(account__in=reach.accounts())


def access_draft_by_id(draft_id: str, *, reach: Reach, lock: bool = False) -> Draft:
    """The draft, checked like a message: another tenant's id is NOT_FOUND, another workspace's OUT_OF_SCOPE;
    locked until the transaction ends when `lock` (a change about to edit it)."""
    rows = Draft.objects.for_tenant(reach.tenant).filter(pk=parse_id(draft_id, "draft_id"))
    draft = (rows.select_for_update() if lock else rows).first()
    if draft is None:
        raise OakenError.not_found("draft_id")
    access_account_by_id(str(draft.account_id), reach=reach, field="draft_id")  # the workspace check
    return draft


def draft_files(*, tenant: Tenant, draft: Draft) -> QuerySet[OutboundAttachment]:
    """A draft's files in their order (send_draft sends them as they are)."""
    return OutboundAttachment.objects.for_tenant(tenant).filter(draft=draft).order_by("position")


def draft_has_open_request(*, tenant: Tenant, draft: Draft) -> bool:
    """Whether a request made from this draft is still to be sent (or being sent)."""
    return OutboundRequest.objects.for_tenant(tenant).filter(draft=draft, state__in=OPEN_STATES).exists()


def message_text(*, tenant: Tenant, message: Message) -> str:
    """A message's text body, read on its own (a reply quotes it, a forward carries it)."""
    return Message.objects.for_tenant(tenant).filter(pk=message.pk).values_list("text_body", flat=True).get()


def forwardable_attachments(*, tenant: Tenant, message: Message) -> list[Attachment]:
    """The files a forward carries: the message's attachments that are not inline parts, in their order."""
    return list(Attachment.objects.for_tenant(tenant).filter(message=message, inline=False).order_by("id"))


def message_by_message_id(*, account: MailAccount, message_id: str) -> Message | None:
    """The account's message with this Message-ID (without angle brackets), if it has one."""
    return Message.objects.for_tenant(account.tenant).filter(account=account, message_id=message_id).first()


def visible_outbound_requests(*, actor: Caller, reach: Reach) -> QuerySet[OutboundRequest]:
    """Persons: requests made for them (an ADMIN: the tenant's), in accounts they reach. Agents: those made
    through their own credential, in accounts they reach. The system: the tenant's. Another tenant's request is
    simply not there."""
    rows = OutboundRequest.objects.for_tenant(reach.tenant)
    if actor.principal == Principal.AGENT:
        return rows.filter(
            requested_by=actor.user,
            credential_id=actor.credential_id,
            credential_kind=actor.credential_kind,
            account__in=reach.accounts(),
        )
    if actor.principal == Principal.PERSON:
        rows = rows.visible_to(actor)
        # a MEMBER given some workspaces: not even their own requests from a mailbox no longer theirs to use
        return rows if reach.workspaces is None else rows.filter(account__in=reach.accounts())
    return rows


def access_outbound_request_by_id(
    request_id: str, *, actor: Caller, reach: Reach, lock: bool = False
) -> OutboundRequest:
    """The request, locked until the transaction ends when `lock` (a change about to move its state)."""
    rows = visible_outbound_requests(actor=actor, reach=reach).filter(pk=parse_id(request_id, "request_id"))
    found = (rows.select_for_update() if lock else rows).first()
    if found is None:
        raise OakenError.not_found("request_id")
    return found


def access_internal_outbound_request_by_id(request_id: str, *, tenant: Tenant) -> uuid.UUID:
    """The id of the tenant's request named, for the system's own steps (each moves it by a guarded UPDATE of
    its own, so the row is not loaded here)."""
    found = parse_id(request_id, "request_id")
    if not OutboundRequest.objects.for_tenant(tenant).filter(pk=found).exists():
        raise OakenError.not_found("request_id")
    return found


def outbound_request(request_id: uuid.UUID, *, tenant: Tenant) -> OutboundRequest:
    """The tenant's request as it is now, by an id already resolved."""
    return OutboundRequest.objects.for_tenant(tenant).get(pk=request_id)


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def credential_names(*, tenant: Tenant, rows: Iterable[OutboundRequest]) -> dict[tuple[str, str], str]:
    """The name of each API key and connection that made one of these requests, looked up in this tenant only."""
    wanted = [(r.credential_kind, r.credential_id) for r in rows if r.credential_id]
    names: dict[tuple[str, str], str] = {}
    keys = {i for kind, i in wanted if kind == "apikey" and _is_uuid(i)}
    connections = {i for kind, i in wanted if kind == "oauth" and _is_uuid(i)}
    for key in ApiKey.objects.for_tenant(tenant).filter(pk__in=keys).only("pk", "name", "prefix"):
        names["apikey", str(key.pk)] = f"the API key {key.name or 'unnamed'} ({key.prefix}_…)"
    for c in Connection.objects.for_tenant(tenant).filter(pk__in=connections).only("pk", "client_name"):
        names["oauth", str(c.pk)] = f"the connection {c.client_name or 'of an assistant'}"
    for kind, i in wanted:
        names.setdefault((kind, i), "a removed API key" if kind == "apikey" else "a removed connection")
    return names


FileRow = tuple[uuid.UUID, str, str, int]  # id, filename, content type, size


def request_files(*, tenant: Tenant, rows: Iterable[OutboundRequest]) -> dict[uuid.UUID, list[FileRow]]:
    """Each request's files in their order, for a whole page of requests in one query (never their content)."""
    found: dict[uuid.UUID, list[FileRow]] = {}
    files = (
        OutboundAttachment.objects.for_tenant(tenant)
        .filter(request_id__in=[r.pk for r in rows])
        .order_by("request_id", "position")
        .annotate(size=Length("content"))
        .values_list("request_id", "pk", "filename", "content_type", "size")
    )
    for request_id, *file in files:
        found.setdefault(request_id, []).append((file[0], file[1], file[2], file[3]))
    return found


class PageFacts(NamedTuple):
    """What a page of requests looks up once for all its rows: credential names, files and retry times."""

    names: dict[tuple[str, str], str]
    files: dict[uuid.UUID, list[FileRow]]
    retries: dict[Any, datetime]


def page_facts(*, tenant: Tenant, rows: list[OutboundRequest]) -> PageFacts:
    return PageFacts(
        credential_names(tenant=tenant, rows=rows), request_files(tenant=tenant, rows=rows), retry_times(tenant, rows)
    )


def signature_of(*, tenant: Tenant, account: MailAccount) -> Signature | None:
    return Signature.objects.for_tenant(tenant).filter(account=account).first()


def signatures_in_reach(*, reach: Reach) -> QuerySet[Signature]:
    return Signature.objects.for_tenant(reach.tenant).filter(account__in=reach.accounts())


def visible_send_policies(*, tenant: Tenant, actor: Caller) -> QuerySet[SendPolicy]:
    return SendPolicy.objects.for_tenant(tenant).select_related("created_by").visible_to(actor)


def access_send_policy_by_id(policy_id: str, *, tenant: Tenant, actor: Caller) -> SendPolicy:
    found = visible_send_policies(tenant=tenant, actor=actor).filter(pk=parse_id(policy_id, "policy_id")).first()
    if found is None:
        raise OakenError.not_found("policy_id")
    return found


def access_outbound_file_by_id(
    attachment_id: str, *, actor: Caller, reach: Reach, field: str = "attachment_id"
) -> OutboundAttachment:
    """A file of a request the caller may see (its id and request only): another tenant's, or one of a request
    out of reach, is NOT_FOUND."""
    rows = OutboundAttachment.objects.for_tenant(reach.tenant)
    found = rows.filter(pk=parse_id(attachment_id, field), request__isnull=False).only("pk", "request_id").first()
    if found is None:
        raise OakenError.not_found(field)
    try:
        access_outbound_request_by_id(str(found.request_id), actor=actor, reach=reach)
    except OakenError:
        raise OakenError.not_found(field) from None
    return found


def outbound_file(*, tenant: Tenant, file: OutboundAttachment) -> StoredFile:
    return stored_file(OutboundAttachment.objects.for_tenant(tenant), file.pk)


def access_draft_file_by_id(attachment_id: str, *, tenant: Tenant, draft: Draft, field: str) -> StoredFile:
    """A file the draft holds: another draft's, or another tenant's, is NOT_FOUND."""
    rows = OutboundAttachment.objects.for_tenant(tenant).filter(draft=draft, pk=parse_id(attachment_id, field))
    found = rows.values_list("pk", "filename", "content_type", "content").first()
    if found is None:
        raise OakenError.not_found(field)
    return StoredFile(found[0], found[1], found[2], bytes(found[3]))


def send_policies_by_ids(*, tenant: Tenant, ids: Collection[uuid.UUID]) -> QuerySet[SendPolicy]:
    """The tenant's send policies with these ids, each with who made it."""
    return SendPolicy.objects.for_tenant(tenant).filter(pk__in=ids).select_related("created_by")


def used_lately(*, tenant: Tenant, kind: str, since: datetime, column: str = "pk") -> Exists:
    """A condition on an outer row: its budget (its `column`, of this kind) used something since `since`."""
    return Exists(
        BudgetUsage.objects.for_tenant(tenant).filter(
            kind=kind, budget_id=Cast(OuterRef(column), CharField()), window_start__gte=since
        )
    )


def budget_usage_since(*, tenant: Tenant, budgets: Iterable[tuple[str, str]], since: datetime) -> QuerySet[BudgetUsage]:
    """The rolled-up hours of these budgets, (kind, id) each, from `since` on."""
    budgets = list(budgets)
    which = Q()
    for kind in {k for k, _ in budgets}:
        which |= Q(kind=kind, budget_id__in=[b for k, b in budgets if k == kind])
    return BudgetUsage.objects.for_tenant(tenant).filter(which, window_start__gte=since)


def names_by_ids(*, tenant: Tenant, ids: Collection[uuid.UUID]) -> dict[uuid.UUID, tuple[str, str | None]]:
    """What each of these ids is among the tenant's send policies, drafts and outbound requests: (kind, name).
    Only a policy is named; a draft or request is not, as its subject is mail text."""
    found: dict[uuid.UUID, tuple[str, str | None]] = {}
    for pk, name in SendPolicy.objects.for_tenant(tenant).filter(pk__in=ids).values_list("pk", "name"):
        found[pk] = ("send policy", name)
    unnamed: tuple[tuple[str, Any], ...] = (("draft", Draft), ("outbound request", OutboundRequest))
    for kind, model in unnamed:
        for pk in model.objects.for_tenant(tenant).filter(pk__in=ids).values_list("pk", flat=True):
            found[pk] = (kind, None)
    return found


def waiting_sends_outside(*, tenant: Tenant, user_id: Any, workspace_ids: Collection[Any]) -> int:
    """How many of this person's requests still waiting to go out are from mailboxes outside these workspaces
    (what narrowing them fails: apps.outbound.execution.requester_reaches)."""
    waiting = OutboundRequest.objects.for_tenant(tenant).filter(requested_by_id=user_id, state__in=CANCELLABLE)
    return waiting.exclude(account__workspace_id__in=list(workspace_ids)).count()


def visible_automations(*, reach: Reach) -> QuerySet[Automation]:
    """The automations of the mailboxes the caller reaches (an automatic reply belongs to its mailbox: whoever may
    use the mailbox sees what it sends by itself)."""
    return Automation.objects.for_tenant(reach.tenant).filter(account__in=reach.accounts())


def access_automation_by_id(automation_id: str, *, reach: Reach) -> Automation:
    """Checked like a draft: another tenant's id is NOT_FOUND, another workspace's OUT_OF_SCOPE."""
    found = (
        Automation.objects.for_tenant(reach.tenant)
        .filter(pk=parse_id(automation_id, "automation_id"))
        .select_related("account", "approved_by", "requested_by")
        .first()
    )
    if found is None:
        raise OakenError.not_found("automation_id")
    access_account_by_id(str(found.account_id), reach=reach, field="automation_id")  # the workspace check
    return found


def drafts_existing(*, tenant: Tenant, ids: Collection[uuid.UUID]) -> set[str]:
    """Which of these drafts still exist in the tenant."""
    return {str(pk) for pk in Draft.objects.for_tenant(tenant).filter(pk__in=ids).values_list("pk", flat=True)}


def requests_by_ids(*, tenant: Tenant, ids: Collection[uuid.UUID]) -> dict[str, OutboundRequest]:
    """The tenant's outbound requests among these ids, without their text (where they went, how far they got)."""
    rows = OutboundRequest.objects.for_tenant(tenant).filter(pk__in=ids).only("id", "state", "to", "cc", "bcc", "kind")
    return {str(r.pk): r for r in rows}
