"""Where an agent's request came from (SPEC §23): its provenance flags, computed from what its credential read in
the window (apps.agents.reads) and the mailbox's own correspondence, each with its evidence (which message, which
sender, when it was read: ids, addresses and times, never mail text).

- first_contact: a recipient nobody in this mailbox has written to (its Sent folder, or a send a person made or
  approved), and who did not write any of the mail the agent read (answering someone is not contacting them);
- recipient_from_untrusted: such a recipient appears in the text of mail from an unknown sender that the agent
  read (and is not that mail's own sender: a reply to whoever wrote is not taken from their mail);
- content_from_untrusted: the request's subject or body reproduces PROVENANCE_SPAN_CHARS characters or more of
  mail the agent read from a sender other than the recipients, or a file it attaches was received from one;
- after_untrusted_read: the agent read mail from an unknown sender other than the recipients;
- reads_unrecorded: what the credential read could not be recorded for a while (Redis away) and the window since
  has not passed: none of the above can be told, so a person decides.

A send policy never approves a request flagged recipient_from_untrusted or content_from_untrusted, nor (unless
PROVENANCE_POLICY_FIRST_CONTACT says so) first_contact with after_untrusted_read; a credential in lockdown has
every request wait for a person once it has read mail from an unknown sender (`held`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models.functions import Left

from apps.agents import reads
from apps.agents.selectors import credential_row
from apps.core.acts import Act
from apps.core.bounds import bounds
from apps.core.kinds import Principal
from apps.mail.models import Attachment, MailAccount, Message
from apps.outbound.models import Automation, OutboundRequest, State
from apps.workspaces.models import Tenant

RECIPIENT_FROM_UNTRUSTED = "recipient_from_untrusted"
CONTENT_FROM_UNTRUSTED = "content_from_untrusted"
FIRST_CONTACT = "first_contact"
AFTER_UNTRUSTED_READ = "after_untrusted_read"
# what the credential read could not be recorded (Redis away) within the window: nothing above can be told
READS_UNRECORDED = "reads_unrecorded"
# in the order a person reads them
FLAGS = (RECIPIENT_FROM_UNTRUSTED, CONTENT_FROM_UNTRUSTED, FIRST_CONTACT, AFTER_UNTRUSTED_READ, READS_UNRECORDED)
# no send policy ever approves a request with one of these
NEVER_BY_POLICY = frozenset((RECIPIENT_FROM_UNTRUSTED, CONTENT_FROM_UNTRUSTED, READS_UNRECORDED))
# evidence entries kept per flag (the newest reads first)
EVIDENCE_PER_FLAG = 5
# how many times one piece of a request's text is looked for in one message before giving up on that piece
_PIECE_LOOKS = 50
_QUOTE_MARKS = re.compile(r"^[ \t>|]+", re.MULTILINE)
_SPACES = re.compile(r"\s+")


@dataclass
class Provenance:
    """A request's flags with their evidence, and whether its credential's lockdown holds it."""

    flags: list[str] = field(default_factory=list)
    evidence: list[dict[str, Any]] = field(default_factory=list)
    lockdown: bool = False

    def flag(self, name: str, **evidence: Any) -> None:
        if name not in self.flags:
            self.flags.append(name)
        if sum(1 for e in self.evidence if e["flag"] == name) < EVIDENCE_PER_FLAG:
            self.evidence.append({"flag": name} | evidence)

    def as_json(self) -> dict[str, Any]:
        """As stored on the request: flags in FLAGS order, evidence with times in ISO 8601."""
        flags = [f for f in FLAGS if f in self.flags]
        evidence = [
            {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in e.items()}
            for e in sorted(self.evidence, key=lambda e: FLAGS.index(e["flag"]))
        ]
        return {"flags": flags, "evidence": evidence, "lockdown": self.lockdown}


def held(provenance: dict[str, Any]) -> bool:
    """Whether no send policy may approve a request with this provenance: a person decides."""
    flags = set(provenance.get("flags", ()))
    if provenance.get("lockdown") or flags & NEVER_BY_POLICY:
        return True
    return {FIRST_CONTACT, AFTER_UNTRUSTED_READ} <= flags and not bounds.PROVENANCE_POLICY_FIRST_CONTACT


@dataclass(frozen=True)
class _Seen:
    """A message the agent read, as the mail store has it now (or as the record named it, once gone)."""

    message_id: str
    sender: str
    at: datetime
    account_id: Any = None
    text: str = ""
    thread_id: str | None = None


def _normal(text: str) -> str:
    """Text as compared for a copied span: quote marks at line starts dropped, spaces folded, case folded."""
    return _SPACES.sub(" ", _QUOTE_MARKS.sub("", text)).strip().casefold()


def shares_span(text: str, source: str, length: int) -> bool:
    """Whether `text` and `source` (both _normal) have a common stretch of at least `length` characters. Any such
    stretch holds one of `text`'s pieces of length//2 at a multiple of it: each is found in `source`, then grown."""
    step = max(1, length // 2)
    if len(text) < length or len(source) < length:
        return False
    for p in range(0, len(text) - step + 1, step):
        piece = text[p : p + step]
        q = source.find(piece)
        looks = 0
        while q != -1 and looks < _PIECE_LOOKS:
            before = 0
            while before < p and before < q and text[p - before - 1] == source[q - before - 1]:
                before += 1
            after = step
            while p + after < len(text) and q + after < len(source) and text[p + after] == source[q + after]:
                after += 1
            if before + after >= length:
                return True
            q = source.find(piece, q + 1)
            looks += 1
    return False


def known_correspondents(tenant: Tenant, account_ids: Iterable[Any], addresses: Iterable[str]) -> set[str]:
    """Which of these addresses (casefolded) these mailboxes have written to: mail in their Sent folders, or a
    request a person made or approved."""
    wanted = sorted({a.casefold() for a in addresses if a})
    accounts = [str(a) for a in set(account_ids)]
    if not wanted or not accounts:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT lower(r->>'address')
              FROM mail_message m JOIN mail_folder f ON f.id = m.folder_id,
                   jsonb_array_elements(m.to_addresses || m.cc_addresses || m.bcc_addresses) r
             WHERE m.tenant_id = %(tenant)s AND m.account_id = ANY(%(accounts)s::uuid[]) AND f.kind = 'sent'
               AND lower(r->>'address') = ANY(%(wanted)s)
            UNION
            SELECT lower(a)
              FROM outbound_outboundrequest o, unnest(o.to || o.cc || o.bcc) a
             WHERE o.tenant_id = %(tenant)s AND o.account_id = ANY(%(accounts)s::uuid[])
               AND (o.principal = 'person' OR o.approved_via = 'person')
               AND o.state = ANY(%(states)s) AND lower(a) = ANY(%(wanted)s)
            """,
            {
                "tenant": tenant.pk,
                "accounts": accounts,
                "wanted": wanted,
                "states": [State.APPROVED, State.QUEUED, State.SENDING, State.SENT, State.UNKNOWN],
            },
        )
        return {row[0] for row in cursor.fetchall()}


def own_addresses(tenant: Tenant) -> set[str]:
    """The tenant's own mailboxes' addresses (casefolded): mail between them is nobody else's."""
    found = MailAccount.objects.for_tenant(tenant).exclude(email_address="").values_list("email_address", flat=True)
    return {a.casefold() for a in found}


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def _seen(tenant: Tenant, recorded: list[reads.Read]) -> list[_Seen]:
    """The reads with their messages as stored now (this tenant's only), newest first, their text cut at the
    text bound as a read of them was."""
    ids = [u for u in (_uuid(r.message_id) for r in recorded) if u is not None]
    rows = {
        str(row["id"]): row
        for row in Message.objects.for_tenant(tenant)
        .filter(pk__in=ids)
        .annotate(text=Left("text_body", bounds.TEXT_MAX_CHARS))
        .values("id", "account_id", "thread_id", "sender_address", "subject", "text")
    }
    seen = []
    for read in recorded:
        row = rows.get(read.message_id)
        if row is None:
            seen.append(_Seen(read.message_id, read.sender, read.at))
            continue
        text = f"{row['subject']}\n{row['text']}"
        sender = row["sender_address"].casefold()
        seen.append(_Seen(read.message_id, sender, read.at, row["account_id"], text, str(row["thread_id"])))
    return seen


def assess(
    *,
    act: Act,
    account: MailAccount,
    recipients: Iterable[str],
    text: str,
    files: Iterable[bytes] = (),
) -> Provenance:
    """The provenance of an agent's request from `account` to `recipients`, with its subject and body (`text`)
    and its files; a person's own request has none."""
    caller = act.caller
    found = Provenance()
    if caller.principal != Principal.AGENT:
        return found
    tenant = act.tenant
    to = {r.casefold() for r in recipients if r}
    seen = _seen(tenant, reads.reads_of(tenant.pk, caller.credential_kind, caller.credential_id))
    own = own_addresses(tenant)
    senders = {s.sender for s in seen if s.sender}
    known = (
        known_correspondents(tenant, {account.pk, *(s.account_id for s in seen if s.account_id)}, to | senders) | own
    )
    untrusted = [s for s in seen if s.sender not in known]

    # someone whose mail the agent read wrote to this mailbox: writing back is answering them, not a first contact
    # (what the request carries is still weighed: content_from_untrusted, and the policy decides their domain)
    strangers = sorted(to - known - senders)
    for address in strangers:
        found.flag(FIRST_CONTACT, recipient=address, message_id=None, sender=None, read_at=None)
    for s in untrusted:
        if s.sender not in to:
            found.flag(
                AFTER_UNTRUSTED_READ,
                message_id=s.message_id,
                thread_id=s.thread_id,
                sender=s.sender or None,
                read_at=s.at,
            )
    for address in strangers:
        for s in untrusted:
            if s.sender != address and address in s.text.casefold():
                found.flag(
                    RECIPIENT_FROM_UNTRUSTED,
                    recipient=address,
                    message_id=s.message_id,
                    thread_id=s.thread_id,
                    sender=s.sender,
                    read_at=s.at,
                )
    others = [s for s in seen if s.text and s.sender not in to and s.sender not in own]
    wrote = _normal(text)
    span = bounds.PROVENANCE_SPAN_CHARS
    for s in others:
        if shares_span(wrote, _normal(s.text), span):
            found.flag(
                CONTENT_FROM_UNTRUSTED, message_id=s.message_id, thread_id=s.thread_id, sender=s.sender, read_at=s.at
            )
    _received_files(found, tenant, list(files), to | own, {s.message_id: s.at for s in seen})
    # the credential's own standing, in one read: lockdown, and reads that went unrecorded while Redis was away
    row = (
        credential_row(tenant_id=tenant.pk, kind=caller.credential_kind, credential_id=caller.credential_id)
        .values("lockdown", "reads_unrecorded_until")
        .first()
    ) or {"lockdown": False, "reads_unrecorded_until": None}
    gap = row["reads_unrecorded_until"]
    if gap is not None and gap > act.now:
        found.flag(READS_UNRECORDED, message_id=None, sender=None, read_at=None, until=gap)
    found.lockdown = bool(untrusted) and row["lockdown"]
    return found


def _received_files(
    found: Provenance, tenant: Tenant, files: list[bytes], insiders: set[str], read_at: dict[str, datetime]
) -> None:
    """Flag each file that is, byte for byte, an attachment this tenant received from someone other than the
    recipients (and its own mailboxes)."""
    for data in files:
        if not data:
            continue
        match = (
            Attachment.objects.for_tenant(tenant)
            .filter(size=len(data), content=data)
            .values("message_id", "message__thread_id", "message__sender_address")
            .order_by("-message_id")
        )
        for row in match[:EVIDENCE_PER_FLAG]:
            sender = (row["message__sender_address"] or "").casefold()
            if sender in insiders:
                continue
            message_id = str(row["message_id"])
            found.flag(
                CONTENT_FROM_UNTRUSTED, message_id=message_id, sender=sender or None, read_at=read_at.get(message_id)
            )
            break


def of_request(request: OutboundRequest | Automation) -> dict[str, Any]:
    """A request's (or an automation's) provenance as answered: its flags and evidence (none for a person's own)."""
    stored = request.provenance or {}
    return {
        "flags": list(stored.get("flags", [])),
        "evidence": list(stored.get("evidence", [])),
        "lockdown": bool(stored.get("lockdown", False)),
    }
