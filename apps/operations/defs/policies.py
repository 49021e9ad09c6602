"""Send policies (SPEC §10): a person's standing approval for an agent's requests to these recipients or domains,
up to N recipients an hour. Persons only: an agent can never widen what it may send."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, NamedTuple

from pydantic import ConfigDict, Field, StringConstraints

from apps.core import words
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.mail.models import MailAccount
from apps.operations.context import Context
from apps.operations.defs.drafts import Address
from apps.operations.defs.shapes import Closed, Empty, Id
from apps.operations.registry import ALWAYS, Callers, Ceiling, OpClass, Preview, operation
from apps.operations.targets import account_of
from apps.outbound import policies as policy_services
from apps.outbound.compose import (
    normalize_address,
)
from apps.outbound.models import SendPolicy
from apps.outbound.selectors import (
    access_send_policy_by_id,
    visible_send_policies,
)

Domain = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True,
        to_lower=True,
        min_length=1,
        max_length=255,
        pattern=r"^@?[a-z0-9]([a-z0-9.-]*[a-z0-9])?$",
    ),
]


class CreatePolicyIn(Closed):
    # a policy allows someone: at least one address or domain (checked by _new_policy, published here)
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": ["allowed_addresses"], "properties": {"allowed_addresses": {"minItems": 1}}},
                {"required": ["allowed_domains"], "properties": {"allowed_domains": {"minItems": 1}}},
            ]
        }
    )
    name: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
    account_id: Id | None = Field(default=None, description="null: any account")
    allowed_addresses: list[Address] = Field(default=[], max_length=500)
    allowed_domains: list[Domain] = Field(default=[], max_length=100)
    recipients_per_hour: int = Field(ge=1, le=10_000)


class PolicyOut(Closed):
    id: str
    name: str
    account_id: str | None
    allowed_addresses: list[str]
    allowed_domains: list[str]
    recipients_per_hour: int
    created_by: str
    created_at: datetime


def policy_out(policy: SendPolicy) -> PolicyOut:
    return PolicyOut(
        id=str(policy.pk),
        name=policy.name,
        account_id=str(policy.account_id) if policy.account_id else None,
        allowed_addresses=list(policy.allowed_addresses),
        allowed_domains=list(policy.allowed_domains),
        recipients_per_hour=policy.recipients_per_hour,
        created_by=policy.created_by.email,
        created_at=policy.created_at,
    )


class NewPolicy(NamedTuple):
    account: MailAccount | None  # None: any account
    addresses: list[str]  # the allowed addresses and domains, as stored
    domains: list[str]

    @property
    def fields(self) -> dict[str, Any]:
        return {"allowed_addresses": self.addresses, "allowed_domains": self.domains}


def _new_policy(ctx: Context, data: CreatePolicyIn) -> NewPolicy:
    account = account_of(ctx, data.account_id) if data.account_id is not None else None
    if not data.allowed_addresses and not data.allowed_domains:
        raise OakenError.invalid("allowed_addresses", "name allowed addresses or domains")
    addresses = list(dict.fromkeys(normalize_address(a, "allowed_addresses") for a in data.allowed_addresses))
    domains = list(dict.fromkeys(d.lstrip("@") for d in data.allowed_domains))
    return NewPolicy(account, addresses, domains)


def _policy_preview(ctx: Context, data: CreatePolicyIn) -> Preview:
    new: NewPolicy = ctx.targets
    return Preview(
        (
            Change(
                "new send policy",
                None,
                {**new.fields, "account_id": data.account_id, "recipients_per_hour": data.recipients_per_hour},
            ),
        ),
        summary=f"Create the send policy {words.named(data.name)}: requests to the people it allows are sent "
        f"without waiting for a person, up to {words.count(data.recipients_per_hour, 'recipient')} an hour.",
        title="Create this send policy?",
        verb="Create policy",
        lines=tuple(
            line
            for line in (
                f"It allows {words.listed(new.addresses)}." if new.addresses else "",
                f"It allows anyone at {words.listed(new.domains)}." if new.domains else "",
                f"Only from the mailbox {words.named(new.account.name)}." if new.account else "From any mailbox.",
            )
            if line
        ),
    )


@operation(
    name="create_send_policy",
    summary="Let requests made for you be approved without asking when every recipient is an allowed "
    "address or domain, up to a number of recipients an hour.",
    input=CreatePolicyIn,
    output=PolicyOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    preview=_policy_preview,
    confirm=ALWAYS,
    targets=_new_policy,
    callers=Callers.PERSONS,
)
def create_send_policy(ctx: Context, data: CreatePolicyIn) -> PolicyOut:
    assert ctx.caller.user is not None
    new: NewPolicy = ctx.targets
    policy = policy_services.create_send_policy(
        tenant=ctx.tenant,
        created_by=ctx.caller.user,
        name=data.name,
        account=new.account,
        allowed_addresses=new.addresses,
        allowed_domains=new.domains,
        recipients_per_hour=data.recipients_per_hour,
        now=ctx.now,
    )
    after = {
        "policy": "created",
        "recipients_per_hour": policy.recipients_per_hour,
        "addresses": len(policy.allowed_addresses),
        "domains": policy.allowed_domains,
    }
    ctx.touch(policy.pk, None, after)
    return policy_out(policy)


class PoliciesOut(Closed):
    policies: list[PolicyOut]


@operation(
    name="list_send_policies",
    summary="Your send policies (an ADMIN sees the tenant's).",
    input=Empty,
    output=PoliciesOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.NEVER,
)
def list_send_policies(ctx: Context, data: Empty) -> PoliciesOut:
    policies = visible_send_policies(tenant=ctx.tenant, actor=ctx.caller).order_by("created_at")
    return PoliciesOut(policies=[policy_out(p) for p in policies])


class PolicyIn(Closed):
    policy_id: Id


def _the_policy(ctx: Context, data: PolicyIn) -> SendPolicy:
    return access_send_policy_by_id(data.policy_id, tenant=ctx.tenant, actor=ctx.caller)


def _delete_policy_preview(ctx: Context, data: PolicyIn) -> Preview:
    policy: SendPolicy = ctx.targets
    return Preview(
        (Change(str(policy.pk), {"policy": "exists"}, {"policy": "deleted"}),),
        summary=f"Delete the send policy {words.named(policy.name)}. Requests it would have sent wait for a person "
        "again.",
        title="Delete this send policy?",
        verb="Delete policy",
    )


class PolicyDeletedOut(Closed):
    policy_id: str
    deleted: bool


@operation(
    name="delete_send_policy",
    summary="Delete a send policy: from now on requests it would have approved wait for a person.",
    input=PolicyIn,
    output=PolicyDeletedOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    preview=_delete_policy_preview,
    confirm=ALWAYS,
    targets=_the_policy,
    callers=Callers.PERSONS,
)
def delete_send_policy(ctx: Context, data: PolicyIn) -> PolicyDeletedOut:
    policy: SendPolicy = ctx.targets
    policy_services.delete_send_policy(tenant=ctx.tenant, policy=policy)
    ctx.touch(policy.pk, {"policy": "exists"}, {"policy": "deleted"})
    return PolicyDeletedOut(policy_id=str(policy.pk), deleted=True)
