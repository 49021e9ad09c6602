"""Outgoing message content: recipients normalised and counted, the content hash, reply and forward
texts, and the MIME bytes built from a request (the same bytes for SMTP and for the Sent copy)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import unicodedata
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from email.headerregistry import Address
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime, getaddresses

from apps.audit.log import canonical_json
from apps.core.bounds import Bounds
from apps.core.errors import OakenError
from apps.mail.mediatypes import MEDIA_TYPE
from apps.mail.parsing.headers import normalize_subject

_ADDRESS = re.compile(r"^[^@\s<>(),;:\"\[\]\\]+@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,253}[A-Za-z0-9])?$")


def normalize_address(value: str, field: str) -> str:
    """A bare address with its domain lower-cased; refused (naming the field, never the value) when it is not one."""
    pairs = getaddresses([value])
    if len(pairs) != 1 or not pairs[0][1]:
        raise OakenError.invalid(field, "holds something that is not an e-mail address")
    local, _, domain = pairs[0][1].strip().rpartition("@")
    address = f"{local}@{domain.lower()}"
    # no control or invisible characters either (NUL, DEL, a bidi override that shows "moc.live" as "evil.com"):
    # an automatic reply's recipient comes from a stranger's mail, an agent's is shown to a person to approve
    if not _ADDRESS.match(address) or len(address) > 320 or any(_hidden(c) for c in address):
        raise OakenError.invalid(field, "holds something that is not an e-mail address")
    return address


@dataclass(frozen=True)
class Recipients:
    to: list[str]
    cc: list[str]
    bcc: list[str]

    @property
    def everyone(self) -> list[str]:
        return [*self.to, *self.cc, *self.bcc]

    @property
    def count(self) -> int:
        return len(self.everyone)


def recipients(to: Iterable[str], cc: Iterable[str], bcc: Iterable[str]) -> Recipients:
    """Normalised and de-duplicated across to, cc and bcc (an address keeps its first, most visible place)."""
    seen: set[str] = set()
    lists: list[list[str]] = []
    for field, values in (("to", to), ("cc", cc), ("bcc", bcc)):
        kept = []
        for value in values:
            address = normalize_address(value, field)
            if address.casefold() not in seen:
                seen.add(address.casefold())
                kept.append(address)
        lists.append(kept)
    return Recipients(*lists)


def check_recipient_limit(found: Recipients, maximum: int) -> None:
    if found.count == 0:
        raise OakenError.invalid("to", "name at least one recipient")
    if found.count > maximum:
        raise OakenError(
            "LIMIT_EXCEEDED", f"at most {maximum} recipients per e-mail (to, cc and bcc together)", field="to"
        )


_BASE64_SPACE = re.compile(r"\s+")


# control characters, invisible formatting (bidirectional overrides: "invoice\u202efdp.exe" shows as
# "invoiceexe.pdf") and line or paragraph separators: none belongs in a file name a person has to judge
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def _hidden(c: str) -> bool:
    return unicodedata.category(c) in _HIDDEN_CATEGORIES


def _unfit(c: str) -> bool:
    return c in "/\\" or _hidden(c)


def attachment_filename(value: str, field: str) -> str:
    """A file name as it goes in the e-mail: no folders, no control or invisible characters (refused, never
    rewritten)."""
    name = value.strip()
    if not name or name in {".", ".."}:
        raise OakenError.invalid(field, "must name the file")
    if any(_unfit(c) for c in name):
        raise OakenError.invalid(field, "must not contain slashes, control or invisible characters")
    return name


def stored_attachment(filename: str, content_type: str) -> tuple[str, str]:
    """A received attachment's name and type, made fit to send on: a third party chose them, so what does not
    fit is dropped (invisible characters) or made plain (a multipart, message or malformed type is sent as
    application/octet-stream, the bytes as they are)."""
    name = "".join("_" if c in "/\\" else c for c in filename if unicodedata.category(c) not in _HIDDEN_CATEGORIES)
    name = name.strip() or "attachment"
    kind = content_type.strip().lower()
    if not MEDIA_TYPE.match(kind) or kind.startswith(("multipart/", "message/")):
        kind = "application/octet-stream"
    return name[:255], kind


def attachment_content_type(value: str | None, field: str) -> str:
    """A bare MIME type (type/subtype, no parameters); multipart types are built by Oaken, never given."""
    if value is None:
        return "application/octet-stream"
    kind = value.strip().lower()
    if not MEDIA_TYPE.match(kind):
        raise OakenError.invalid(field, "is not a MIME type such as application/pdf")
    if kind.startswith(("multipart/", "message/")):
        raise OakenError.invalid(field, "cannot be a multipart or message type: attach the file as it is")
    return kind


def decode_base64(value: str, field: str, max_bytes: int) -> bytes:
    """The bytes of a base64 text (line breaks allowed), refused over max_bytes before it is decoded."""
    text = _BASE64_SPACE.sub("", value)
    # 4 characters per 3 bytes, less the padding (at most two "="; more is no base64): a file over the bound is
    # refused without decoding it
    if len(text) // 4 * 3 - min(2, len(text) - len(text.rstrip("="))) > max_bytes:
        raise OakenError("LIMIT_EXCEEDED", f"{field}: at most {max_bytes} bytes per file", field=field)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise OakenError.invalid(field, "is not base64") from None


def check_attachment_limits(bounds: Bounds, sizes: Sequence[int], field: str) -> None:
    """Refuse (never cut) an e-mail with more files, or more bytes per file or in all, than the bounds allow."""
    count, per_file, total = (
        bounds.SEND_ATTACHMENTS_MAX,
        bounds.SEND_ATTACHMENT_MAX_BYTES,
        bounds.SEND_ATTACHMENTS_TOTAL_MAX_BYTES,
    )
    if len(sizes) > count:
        raise OakenError("LIMIT_EXCEEDED", f"{field}: at most {count} files per e-mail", field=field)
    for i, size in enumerate(sizes):
        if size > per_file:
            where = f"{field}.{i}" if field == "attachments" else field
            raise OakenError("LIMIT_EXCEEDED", f"{where}: at most {per_file} bytes per file", field=where)
    if sum(sizes) > total:
        raise OakenError("LIMIT_EXCEEDED", f"{field}: at most {total} bytes of files per e-mail", field=field)


def new_message_id(sender: str) -> str:
    """A Message-ID (without angle brackets) on the sender's domain, fixed when the request is made."""
    domain = sender.rpartition("@")[2] or "oaken.invalid"
    return f"oaken.{uuid.uuid4().hex}@{domain}"


def sender_name_of(sender_name: str) -> str:
    """The From header's display name for an account's sender name (never its label): on one line, as the
    operations that set it already hold it, and none when it reads as an address."""
    return "" if "@" in sender_name else " ".join(sender_name.split())[:200]


def from_header(sender_name: str, sender: str) -> str:
    """The From header as a person reads it: the display name and the address, exactly what is sent."""
    return f"{sender_name} <{sender}>" if sender_name else sender


def content_hash(
    *,
    account_id: str,
    sender: str,
    sender_name: str,
    found: Recipients,
    subject: str,
    body: str,
    in_reply_to: str,
    references: Sequence[str],
    send_at: datetime | None,
    attachments: Sequence[tuple[str, str, str]],
    kind: str = "email",
    url: str = "",
) -> str:
    """sha256 over exactly what would be sent: what a person approves is bound to this."""
    content = {
        "account": account_id,
        "sender": sender,
        "to": found.to,
        "cc": found.cc,
        "bcc": found.bcc,
        "subject": subject,
        "body": body,
        "in_reply_to": in_reply_to,
        "references": list(references),
        "send_at": send_at.isoformat(timespec="microseconds") if send_at else None,
        "attachments": [list(a) for a in attachments],
    }
    if sender_name:
        # only when there is one, so a request made before display names were hashed keeps its digest
        content["sender_name"] = sender_name
    if kind != "email":
        # an unsubscribe request: what it is, and where a one-click POST goes (e-mails keep their digests)
        content["kind"] = kind
        content["url"] = url
    return hashlib.sha256(canonical_json(content).encode("utf-8", "surrogatepass")).hexdigest()


def reply_subject(subject: str) -> str:
    """'Re: ' once: an existing reply prefix is kept as it is, never stacked."""
    text = " ".join(subject.split())
    return text if re.match(r"(?i)^re\s*:", text) else f"Re: {text}" if text else "Re:"


def forward_subject(subject: str) -> str:
    text = " ".join(subject.split())
    return text if re.match(r"(?i)^(fwd?|fw)\s*:", text) else f"Fwd: {text}"


def same_subject(a: str, b: str) -> bool:
    return normalize_subject(a) == normalize_subject(b)


def quoted(text: str, *, date: datetime | None, sender: str) -> str:
    """The original's text below an attribution line, each line prefixed with '> '."""
    who = sender or "the sender"
    when = f"On {format_datetime(date)}, " if date else ""
    lines = text.rstrip("\n").split("\n") if text else []
    return f"{when}{who} wrote:\n" + "\n".join(f"> {line}" if line else ">" for line in lines) + "\n"


# lines up to RFC 5322's limit: at 78, a message id longer than a line (Outlook's are ~85 characters) is turned
# into encoded words in In-Reply-To and References, which no client reads as an id (the reply loses its thread)
_SENT = SMTP.clone(max_line_length=998)


def build_mime(
    *,
    sender: str,
    sender_name: str,
    to: Sequence[str],
    cc: Sequence[str],
    subject: str,
    body: str,
    message_id: str,
    in_reply_to: str,
    references: Sequence[str],
    date: datetime,
    attachments: Sequence[tuple[str, str, bytes]] = (),
    automatic: Sequence[tuple[str, str]] = (),
) -> bytes:
    """The message as it is sent (Bcc recipients are in the envelope only, never in a header); `automatic`: the
    headers of a message sent by itself (RFC 3834's Auto-Submitted, a forward's mark; apps.outbound.automations)."""
    msg = EmailMessage(policy=_SENT)
    msg["From"] = Address(display_name=sender_name, addr_spec=sender) if sender_name else sender
    if to:
        msg["To"] = ", ".join(to)
    if cc:
        msg["Cc"] = ", ".join(cc)
    msg["Subject"] = subject
    msg["Date"] = format_datetime(date)
    msg["Message-ID"] = f"<{message_id}>"
    if in_reply_to:
        msg["In-Reply-To"] = f"<{in_reply_to}>"
    if references:
        msg["References"] = " ".join(f"<{r}>" for r in references)
    for name, value in automatic:
        msg[name] = value
    msg.set_content(body or "\n", subtype="plain", charset="utf-8")
    for filename, content_type, content in attachments:
        maintype, _, subtype = content_type.partition("/")
        if not subtype:
            maintype, subtype = "application", "octet-stream"
        msg.add_attachment(content, maintype=maintype, subtype=subtype, filename=filename)
    return msg.as_bytes()
