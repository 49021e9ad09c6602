"""Signatures, one per mail account: the text the console's compose form puts below what a person writes.

set_signature is a person's own setting (persons only, never offered to agents); list_signatures is readable by
agents, which get the text as MailText (fenced as data at the MCP door, like mail: anyone who can write a
signature could write instructions into it). A signature is never added to mail by Oaken itself: it is part of a
draft only where the console (or a caller) put it. Its length is bounded by SIGNATURE_MAX_CHARS.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from apps.accounts.models import Signature
from apps.core.changes import Change
from apps.core.errors import OakenError
from apps.mail.models import MailAccount
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, MailText
from apps.operations.registry import NEVER, Bound, Callers, Ceiling, OpClass, Preview, operation
from apps.operations.targets import AccountIn, OptionalAccountIn, account_of, an_account, reach
from apps.outbound import signatures
from apps.outbound.selectors import signature_of, signatures_in_reach


class SignatureOut(Closed):
    account_id: str
    text: MailText = Field(description="the signature as its person wrote it ('' when the account has none)")
    updated_at: datetime | None


class SignaturesOut(Closed):
    signatures: list[SignatureOut] = Field(description="the accounts in reach that have a signature")


def _out(account_id: str, found: Signature | None) -> SignatureOut:
    return SignatureOut(
        account_id=account_id, text=found.text if found else "", updated_at=found.updated_at if found else None
    )


# ---------------------------------------------------------------- set_signature


class SetSignatureIn(AccountIn):
    text: str = Field(description="the signature (plain text, several lines allowed); '' takes it away")


def _signed_account(ctx: Context, data: SetSignatureIn) -> MailAccount:
    account = account_of(ctx, data.account_id)
    limit = ctx.bounds.SIGNATURE_MAX_CHARS
    if len(data.text) > limit:
        raise OakenError("LIMIT_EXCEEDED", f"text: a signature holds at most {limit} characters", field="text")
    return account


def _set_preview(ctx: Context, data: SetSignatureIn) -> Preview:
    account: MailAccount = ctx.targets
    found = signature_of(tenant=ctx.tenant, account=account)
    after = {"signature": "set", "chars": len(data.text)} if data.text else {"signature": "none"}
    return Preview(
        (Change(str(account.pk), signatures.signature_state(found), after),), summary="set the account's signature"
    )


@operation(
    name="set_signature",
    summary="Set the signature of a mail account (the console's compose form puts it below what you write); "
    "an empty text takes it away.",
    input=SetSignatureIn,
    output=SignatureOut,
    op_class=OpClass.MUTATE,
    ceiling=Ceiling.NEVER,
    callers=Callers.PERSONS,
    preview=_set_preview,
    confirm=NEVER,
    targets=_signed_account,
    bounds=(Bound("text", "SIGNATURE_MAX_CHARS"),),
)
def set_signature(ctx: Context, data: SetSignatureIn) -> SignatureOut:
    """A person's own setting, reversible at once: no confirmation asked. Kept as written (only trailing
    whitespace goes)."""
    account: MailAccount = ctx.targets
    return _out(str(account.pk), signatures.set_signature(act=ctx, account=account, text=data.text))


# ---------------------------------------------------------------- list_signatures


@operation(
    name="list_signatures",
    summary="The signatures of one mail account, or of every account in reach (accounts without one are left out).",
    input=OptionalAccountIn,
    output=SignaturesOut,
    op_class=OpClass.READ,
    ceiling=Ceiling.ON,
    targets=an_account,
)
def list_signatures(ctx: Context, data: OptionalAccountIn) -> SignaturesOut:
    account: MailAccount | None = ctx.targets
    rows = signatures_in_reach(reach=reach(ctx))
    if account is not None:
        rows = rows.filter(account=account)
    return SignaturesOut(signatures=[_out(str(s.account_id), s) for s in rows.order_by("account_id")])
