"""Signatures, one per mail account: the text the console's compose form puts below what a person writes.

A signature is never added to mail by Oaken itself: it is part of a draft only where the console (or a caller)
put it. What the audit records of one is whether there is one and its length, never its words."""

from __future__ import annotations

from apps.accounts.models import Signature
from apps.core.acts import Act
from apps.mail.models import MailAccount


def signature_state(found: Signature | None) -> dict[str, object]:
    """What the audit records of a signature: whether there is one and its length, never its words."""
    return {"signature": "set", "chars": len(found.text)} if found else {"signature": "none"}


def set_signature(*, act: Act, account: MailAccount, text: str) -> Signature | None:
    """Set the account's signature as written (only trailing whitespace goes); an empty text takes it away.
    The signature as it is now (None: the account has none)."""
    rows = Signature.objects.for_tenant(act.tenant).filter(account=account)
    found = rows.select_for_update().first()
    before = signature_state(found)
    text = text.rstrip()
    if not text:
        if found is not None:
            rows.delete()
            act.touch(account.pk, before, {"signature": "none"})
        return None
    if found is None:
        found = Signature.objects.create(tenant=act.tenant, account=account, text=text, updated_at=act.now)
    elif found.text != text:
        found.text = text
        found.updated_at = act.now
        found.save(update_fields=["text", "updated_at"])
    else:
        return found
    act.touch(account.pk, before, signature_state(found))
    return found
