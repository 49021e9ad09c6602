"""Drafts (SPEC §16): written, replied and forwarded here, sent only through an outbound request (§10).

The rules a reply follows (whom it goes to, how the original is quoted, the threading headers) are written
once, here: reply_to_message makes a draft with them, and send_email threads a reply to a Message-ID with
the same References rule. Every change records what it did on the act (act.touch), never the mail's text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from apps.core.acts import Act
from apps.core.bounds import Bounds
from apps.core.errors import OakenError
from apps.core.kinds import Principal
from apps.mail.models import Attachment, MailAccount, Message
from apps.outbound.compose import (
    Recipients,
    forward_subject,
    normalize_address,
    quoted,
    recipients,
    reply_subject,
    stored_attachment,
)
from apps.outbound.models import Draft, OutboundAttachment
from apps.outbound.requests import Content, checked, store_files
from apps.outbound.selectors import (
    draft_files,
    draft_has_open_request,
    message_by_message_id,
    message_text,
)
from apps.workspaces.models import Tenant

# an e-mail's files in order: (file name, content type, bytes)
Files = Sequence[tuple[str, str, bytes]]

# the fields of a draft that update_draft changes, besides its files
EDITABLE = ("to", "cc", "bcc", "subject", "body")


# ---------------------------------------------------------------- threading and replies


def thread_references(references: Iterable[str], message_id: str) -> list[str]:
    """The References of a reply: the original's own, then the original's Message-ID (never twice at the end)."""
    found = [r for r in references if r]
    if message_id and (not found or found[-1] != message_id):
        found.append(message_id)
    return found


def thread_of(account: MailAccount, in_reply_to: str | None) -> tuple[str, tuple[str, ...]]:
    """In-Reply-To and References for a reply to a Message-ID (its known references when the account has it)."""
    if not in_reply_to:
        return "", ()
    mid = in_reply_to.strip().strip("<>").strip()
    if not mid or any(c in mid for c in " <>\r\n"):
        raise OakenError.invalid("in_reply_to", "is not a Message-ID")
    parent = message_by_message_id(account=account, message_id=mid)
    return mid, tuple(thread_references(parent.references if parent else [], mid))


def _sender(message: Message) -> str:
    return f"{message.sender_name} <{message.sender_address}>" if message.sender_name else message.sender_address


def reply_recipients(message: Message, *, reply_all: bool) -> tuple[list[str], list[str]]:
    """To and Cc of a reply: the sender (or Reply-To), and with reply_all the original's other To and Cc; never
    the account's own address."""
    mine = message.account.email_address.casefold()
    if message.sender_address.casefold() == mine:  # replying to one's own message: to its recipients again
        to = [a["address"] for a in message.to_addresses]
    else:
        to = [a["address"] for a in message.reply_to_addresses] or [message.sender_address]
    cc: list[str] = []
    if reply_all:
        cc = [a["address"] for a in [*message.to_addresses, *message.cc_addresses]]
    keep = []
    for field, values in (("to", to), ("cc", cc)):
        good = []
        for value in values:
            try:
                address = normalize_address(value, field)
            except OakenError:
                continue  # a malformed address in the original is left out, never guessed at
            if address.casefold() != mine:
                good.append(address)
        keep.append(good)
    found = recipients(keep[0], keep[1], [])
    return found.to, found.cc


def _reply_body(body: str, message: Message, text: str, *, quote: bool) -> str:
    if not quote:
        return body
    block = quoted(text, date=message.date, sender=_sender(message))
    return f"{body.rstrip()}\n\n{block}" if body else block


def _forwarded_block(message: Message, text: str) -> str:
    def names(items: list[dict[str, str]]) -> str:
        return ", ".join(a.get("address", "") for a in items)

    lines = ["---------- Forwarded message ----------", f"From: {_sender(message)}"]
    if message.date:
        lines.append(f"Date: {message.date.isoformat()}")
    lines.append(f"Subject: {message.subject}")
    if message.to_addresses:
        lines.append(f"To: {names(message.to_addresses)}")
    if message.cc_addresses:
        lines.append(f"Cc: {names(message.cc_addresses)}")
    return "\n".join(lines) + "\n\n" + text


# ---------------------------------------------------------------- writing drafts


def _new_draft(
    *,
    act: Act,
    account: MailAccount,
    to: list[str],
    cc: list[str],
    bcc: list[str],
    subject: str,
    body: str,
    in_reply_to: str = "",
    references: Sequence[str] = (),
    source_message: Message | None = None,
    files: Files = (),
) -> Draft:
    """The one place a draft is made; its files become the draft's in this order."""
    draft = Draft.objects.create(
        tenant=act.tenant,
        account=account,
        to=to,
        cc=cc,
        bcc=bcc,
        subject=subject,
        body=body,
        in_reply_to=in_reply_to,
        references=list(references),
        source_message=source_message,
        created_at=act.now,
        updated_at=act.now,
    )
    store_files(files, tenant=act.tenant, draft=draft)
    return draft


def create_draft(*, act: Act, account: MailAccount, found: Recipients, subject: str, body: str, files: Files) -> Draft:
    draft = _new_draft(
        act=act, account=account, to=found.to, cc=found.cc, bcc=found.bcc, subject=subject, body=body, files=files
    )
    act.touch(draft.pk, None, {"draft": "created", "account_id": str(account.pk), "attachments": len(files)})
    return draft


def reply_draft(*, act: Act, message: Message, body: str, reply_all: bool, quote: bool) -> Draft:
    """A reply to the message: its sender (or Reply-To), Re: subject, threading headers, quoted text."""
    text = message_text(tenant=act.tenant, message=message)
    to, cc = reply_recipients(message, reply_all=reply_all)
    draft = _new_draft(
        act=act,
        account=message.account,
        to=to,
        cc=cc,
        bcc=[],
        subject=reply_subject(message.subject),
        body=_reply_body(body, message, text, quote=quote),
        in_reply_to=message.message_id,
        references=thread_references(message.references, message.message_id),
        source_message=message,
    )
    act.touch(draft.pk, None, {"draft": "created", "reply_to": str(message.pk)})
    return draft


def forwarded(
    *, tenant: Tenant, message: Message, note: str, attachments: Sequence[Attachment]
) -> tuple[str, str, tuple[tuple[str, str, bytes], ...]]:
    """A forward's subject, body (the note above the forwarded block) and files, as a person's forward and an
    automatic one (apps.outbound.automations) make it."""
    text = message_text(tenant=tenant, message=message)
    note = note.rstrip()
    body = (note + "\n\n" if note else "") + _forwarded_block(message, text)
    files = tuple((*stored_attachment(f.filename, f.content_type), bytes(f.content)) for f in attachments)
    return forward_subject(message.subject), body, files


def forward_draft(
    *, act: Act, message: Message, found: Recipients, note: str, attachments: Sequence[Attachment]
) -> Draft:
    """A forward of the message, the note above it, with these of its attachments (already held to the bounds)."""
    subject, body, files = forwarded(tenant=act.tenant, message=message, note=note, attachments=attachments)
    draft = _new_draft(
        act=act,
        account=message.account,
        to=found.to,
        cc=found.cc,
        bcc=[],
        subject=subject,
        body=body,
        source_message=message,
        files=files,
    )
    act.touch(draft.pk, None, {"draft": "created", "forward_of": str(message.pk), "attachments": len(attachments)})
    return draft


def check_agent_may_edit(*, act: Act, draft: Draft) -> None:
    """A draft with a send under way or scheduled is not edited through an agent door: cancel it first."""
    if act.caller.principal != Principal.AGENT:
        return
    if draft_has_open_request(tenant=act.tenant, draft=draft):
        raise OakenError(
            "CONFLICT",
            "this draft has a send requested or scheduled: cancel it with cancel_scheduled_send first",
            field="draft_id",
        )


def edited_fields(
    draft: Draft,
    *,
    to: list[str] | None,
    cc: list[str] | None,
    bcc: list[str] | None,
    subject: str | None,
    body: str | None,
) -> dict[str, Any]:
    """The draft's editable fields after an edit (None: unchanged), recipients normalised."""
    found = recipients(
        draft.to if to is None else to, draft.cc if cc is None else cc, draft.bcc if bcc is None else bcc
    )
    return {
        "to": found.to,
        "cc": found.cc,
        "bcc": found.bcc,
        "subject": draft.subject if subject is None else subject,
        "body": draft.body if body is None else body,
    }


def changed_fields(*, act: Act, draft: Draft, new: Mapping[str, Any], files: Files | None) -> list[str]:
    """The names of what an edit changes (files: None keeps the draft's)."""
    changed = [name for name in EDITABLE if getattr(draft, name) != new[name]]
    if files is not None:
        held = draft_files(tenant=act.tenant, draft=draft)
        given = [(name, ctype, hashlib.sha256(content).hexdigest()) for name, ctype, content in files]
        if list(held.values_list("filename", "content_type", "sha256")) != given:
            changed.append("attachments")
    return changed


def update_draft(*, act: Act, draft: Draft, new: Mapping[str, Any], files: Files | None) -> Draft:
    """Write an edit (`new` from edited_fields); a changed list of files replaces the draft's."""
    check_agent_may_edit(act=act, draft=draft)
    changed = changed_fields(act=act, draft=draft, new=new, files=files)
    for name, value in new.items():
        setattr(draft, name, value)
    draft.updated_at = act.now
    draft.save()
    if "attachments" in changed:
        OutboundAttachment.objects.for_tenant(act.tenant).filter(draft=draft).delete()
        store_files(files or (), tenant=act.tenant, draft=draft)
    act.touch(draft.pk, None, {"changed": changed})
    return draft


def delete_draft(*, act: Act, draft: Draft) -> bool:
    """Delete the draft (requests already made from it keep their own copy); False when it was gone already."""
    check_agent_may_edit(act=act, draft=draft)
    deleted, _ = Draft.objects.for_tenant(act.tenant).filter(pk=draft.pk).delete()
    if deleted:
        act.touch(draft.pk, {"draft": "exists"}, {"draft": "deleted"})
    return bool(deleted)


# ---------------------------------------------------------------- sending a draft


def draft_content(
    *, tenant: Tenant, draft: Draft, account: MailAccount, bounds: Bounds, send_at: datetime | None = None
) -> Content:
    """What sending the draft now would send (from `account`, the draft's own), held to the sending bounds."""
    files = draft_files(tenant=tenant, draft=draft)
    content = Content(
        account=account,
        found=recipients(draft.to, draft.cc, draft.bcc),
        subject=draft.subject,
        body=draft.body,
        in_reply_to=draft.in_reply_to,
        references=tuple(draft.references),
        send_at=send_at,
        attachments=tuple((f.filename, f.content_type, bytes(f.content)) for f in files),
    )
    return checked(content, bounds=bounds, files_field="draft_id")
