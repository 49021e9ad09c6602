"""Snippets: one person's reusable texts in one tenant, with placeholders filled when a draft is written.

A placeholder is one of PLACEHOLDERS in braces ({first_name}); any other text in braces is refused when the
snippet is saved. Filling replaces each known placeholder by its value as plain text (one pass, a regular
expression): nothing is ever evaluated or formatted, so "{0.__class__}" or "{sender_name.__init__}" can never
reach an attribute (they are refused at creation, and a stored one would come out as written). What the audit
records of a snippet is its name and length, never its text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from apps.accounts.models import User
from apps.core.acts import Act
from apps.core.errors import OakenError
from apps.core.ids import parse_id
from apps.mail.models import MailAccount, Message
from apps.outbound.compose import sender_name_of
from apps.outbound.models import Snippet
from apps.workspaces.models import Tenant

PLACEHOLDERS = ("first_name", "sender_name", "sender_address", "my_name", "my_address", "subject", "date")
_BRACED = re.compile(r"\{([^{}\r\n]*)\}")
_KNOWN = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
_NAME_TAKEN = "name: you already have a snippet with this name"
# the same rule as a pattern, for the published schemas (ECMA and Python alike, no lookaround): text, known
# placeholders, and braces that close no placeholder (an opening brace with no closing one before the next opening
# brace, line break or end)
_ONE = r"\{(?:" + "|".join(PLACEHOLDERS) + r")\}"
TEXT_PATTERN = rf"^(?:[^{{]|{_ONE}|(?:\{{[^{{}}\r\n]*)+(?:[\r\n]|$|{_ONE}))*$"


def unknown_placeholders(text: str) -> list[str]:
    """The braced names in `text` that are no placeholder, in order, once each."""
    return list(dict.fromkeys(m.group(1) for m in _BRACED.finditer(text) if m.group(1) not in PLACEHOLDERS))


def check_text(text: str) -> None:
    unknown = unknown_placeholders(text)
    if unknown:
        listed = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
        shown = ", ".join("{" + u[:40] + "}" for u in unknown[:3])
        raise OakenError.invalid("text", f"unknown placeholder {shown}: a snippet may use {listed}")


def fill(text: str, values: Mapping[str, str]) -> str:
    """`text` with each known placeholder replaced by its value, as plain text (a value is never read again)."""
    return _KNOWN.sub(lambda m: values.get(m.group(1), ""), text)


def values_for(
    *, account: MailAccount, message: Message | None, subject: str, now: datetime, person_name: str = ""
) -> dict[str, str]:
    """The placeholders' values for a draft from `account`, replying to or forwarding `message` (None: a new
    message, whose sender_* and first_name are empty, its date today). {my_name} is the writing person's name,
    else the name the mailbox sends under, else its address (never the mailbox's label)."""
    my_name = sender_name_of(person_name) or sender_name_of(account.sender_name) or account.email_address
    values = {
        "my_name": my_name,
        "my_address": account.email_address,
        "subject": subject,
        "date": now.date().isoformat(),
        "sender_name": "",
        "sender_address": "",
        "first_name": "",
    }
    if message is not None:
        name = " ".join(message.sender_name.split())
        values |= {
            "sender_name": name or message.sender_address,
            "sender_address": message.sender_address,
            "first_name": name.split(" ")[0] if name else message.sender_address.partition("@")[0],
            "subject": message.subject,
            "date": message.date.date().isoformat() if message.date else values["date"],
        }
    return values


# ---------------------------------------------------------------- the rows


def snippets_of(*, tenant: Tenant, user: User) -> QuerySet[Snippet]:
    return Snippet.objects.for_tenant(tenant).filter(user=user).order_by("name", "id")


def access_snippet_by_id(snippet_id: str, *, tenant: Tenant, user: User, field: str = "snippet_id") -> Snippet:
    """The user's own snippet in the tenant; anyone else's (or none) is NOT_FOUND."""
    found = snippets_of(tenant=tenant, user=user).filter(pk=parse_id(snippet_id, field)).first()
    if found is None:
        raise OakenError.not_found(field)
    return found


def snippet_state(snippet: Snippet) -> dict[str, object]:
    return {"name": snippet.name, "chars": len(snippet.text)}


def _save(snippet: Snippet, *, fresh: bool) -> None:
    try:
        with transaction.atomic():
            snippet.save(force_insert=fresh)
    except IntegrityError:
        raise OakenError("CONFLICT", _NAME_TAKEN, field="name") from None


def create_snippet(*, act: Act, user: User, name: str, text: str, limit: int) -> Snippet:
    check_text(text)
    mine = snippets_of(tenant=act.tenant, user=user)
    if mine.count() >= limit:
        raise OakenError("LIMIT_EXCEEDED", f"you keep at most {limit} snippets: delete one first", field="name")
    if mine.filter(name=name).exists():
        raise OakenError("CONFLICT", _NAME_TAKEN, field="name")
    snippet = Snippet(tenant=act.tenant, user=user, name=name, text=text, created_at=act.now, updated_at=act.now)
    _save(snippet, fresh=True)
    act.touch(snippet.pk, None, snippet_state(snippet))
    return snippet


def update_snippet(*, act: Act, snippet: Snippet, name: str | None, text: str | None) -> Snippet:
    before = snippet_state(snippet)
    if text is not None:
        check_text(text)
        snippet.text = text
    if name is not None and name != snippet.name:
        taken = snippets_of(tenant=act.tenant, user=snippet.user).filter(name=name).exclude(pk=snippet.pk)
        if taken.exists():
            raise OakenError("CONFLICT", _NAME_TAKEN, field="name")
        snippet.name = name
    snippet.updated_at = act.now
    _save(snippet, fresh=False)
    act.touch(snippet.pk, before, snippet_state(snippet))
    return snippet


def delete_snippet(*, act: Act, snippet: Snippet) -> None:
    act.touch(snippet.pk, snippet_state(snippet), None)
    Snippet.objects.for_tenant(act.tenant).filter(pk=snippet.pk).delete()
