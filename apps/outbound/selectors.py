"""Reads of drafts, outbound requests and send policies, always within the caller's reach (SPEC §8, §10).

As for mail: another tenant's id, or a malformed one, is NOT_FOUND exactly like a missing one; a draft in a
workspace the caller was not granted is OUT_OF_SCOPE. Requests and policies are a person's own (an ADMIN sees
the tenant's); an agent sees only the requests made through its own credential, in accounts it reaches.
"""

from __future__ import annotations

from django.db.models import QuerySet

from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.core.kinds import Principal
from apps.mail.selectors import Reach, StoredFile, access_account_by_id, stored_file
from apps.outbound.models import Draft, OutboundAttachment, OutboundRequest, SendPolicy
from apps.workspaces.models import Tenant


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


def visible_outbound_requests(*, actor: Caller, reach: Reach) -> QuerySet[OutboundRequest]:
    """Persons: requests made for them (an ADMIN: the tenant's). Agents: those made through their own
    credential, in accounts they reach. The system: the tenant's. Another tenant's request is simply not there."""
    rows = OutboundRequest.objects.for_tenant(reach.tenant)
    if actor.principal == Principal.AGENT:
        return rows.filter(
            requested_by=actor.user,
            credential_id=actor.credential_id,
            credential_kind=actor.credential_kind,
            account__in=reach.accounts(),
        )
    if actor.principal == Principal.PERSON:
        return rows.visible_to(actor)
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
