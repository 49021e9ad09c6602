"""Turn the raw bytes of one RFC 5322 message into a ParsedMessage: the MIME walk, bodies and attachments,
the content hash.

Real mail is often broken: wrong or unknown charsets, raw 8-bit headers, defective encoded words,
HTML-only bodies. Everything here decodes leniently and never raises for such input; only bytes that
are not a message at all raise MessageParseError.
"""

import binascii
import hashlib
import re
from dataclasses import dataclass
from datetime import datetime
from email.message import Message
from email.parser import BytesParser
from email.policy import EmailPolicy
from functools import lru_cache
from mimetypes import MimeTypes

from apps.mail.mimetree import build_tree
from apps.mail.parsing.charsets import decode_bytes, decode_html
from apps.mail.parsing.headers import (
    KEPT_HEADERS,
    Address,
    addresses,
    decode_header,
    first_value,
    header_hint,
    mime_params,
    parse_date,
    parse_message_ids,
    wanted_headers,
)
from apps.mail.parsing.html_text import html_to_text
from apps.mail.parsing.whitespace import collapse_whitespace, normalize_newlines


@dataclass(slots=True)
class ParsedAttachment:
    """One attachment (or inline part) of a message, decoded."""

    filename: str
    content_type: str
    content: bytes
    size: int
    extracted_text: str
    inline: bool


@dataclass(slots=True)
class ParsedMessage:
    """Everything the import service stores about one message."""

    message_id: str
    in_reply_to: str
    references: list[str]
    subject: str
    sender: Address | None
    to: list[Address]
    cc: list[Address]
    bcc: list[Address]
    reply_to: list[Address]
    date: datetime | None
    text_body: str
    html_body: str
    snippet: str
    size: int
    content_hash: str
    attachments: list[ParsedAttachment]
    headers: dict[str, str]


class MessageParseError(Exception):
    """Raised when bytes cannot be read as a message; .reason is a fixed phrase, never mail content."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _RawHeaderPolicy(EmailPolicy):
    """policy.default, except that reading a header returns its raw unfolded text."""

    # policy.default builds a header object through the header registry on every single access, and
    # the parser itself reads Content-Type four times per part: that alone makes parsing about six times
    # slower than compat32. We decode headers ourselves (more leniently than the registry, which turns
    # raw 8-bit bytes into U+FFFD), so the raw text is all we need.
    def header_fetch_parse(self, name: str, value: str) -> str:
        """Return the header value unfolded, without surrounding whitespace."""
        return value.replace("\r", "").replace("\n", "").strip()


class _Parser:
    """BytesParser's Message tree: built directly for plainly structured mail, by the feedparser otherwise."""

    def __init__(self, policy: EmailPolicy) -> None:
        self.policy = policy
        self.feedparser = BytesParser(policy=policy)

    def parsebytes(self, raw: bytes) -> Message:
        """The tree of raw, as BytesParser(policy).parsebytes(raw) returns it."""
        return build_tree(raw, self.policy, lone_cr=_without_cr(raw)[1]) or self.feedparser.parsebytes(raw)


# refold_source='none' makes as_bytes() write parsed header lines back unchanged (used for nested messages).
_POLICY = _RawHeaderPolicy(refold_source="none")
_PARSER = _Parser(_POLICY)

# MIME trees are not walked deeper than this (a message/* part there is kept only as bytes): real mail
# never nests this far, and hostile mail must not exhaust the stack.
_MAX_DEPTH = 24
_SNIPPET_LENGTH = 200
_MAX_FILENAME = 200

_HEADER_LINE = re.compile(rb"[\x21-\x39\x3b-\x7e]+[ \t]*:")
_VOLATILE_HEADERS = re.compile(
    rb"^(?:status|x-status|x-mozilla-status2?|x-uid|x-keywords|content-length)[ \t]*:.*(?:\n[ \t].*)*\n?",
    re.IGNORECASE | re.MULTILINE,
)
_SLASHES = re.compile(r"[/\\]")
_TEXT_LIKE_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/x-yaml",
        "application/yaml",
        "message/delivery-status",
        "message/disposition-notification",
    }
)
_NESTED_MESSAGE_TYPES = frozenset({"message/rfc822", "message/global", "message/news"})


def parse_message(raw: bytes) -> ParsedMessage:
    """Parse raw RFC 5322 bytes into a ParsedMessage, decoding leniently."""
    _check_looks_like_message(raw)
    try:
        msg = _PARSER.parsebytes(raw)
        return _build_message(msg, raw)
    except MessageParseError:
        raise
    except Exception as exc:
        raise MessageParseError(f"parser error: {type(exc).__name__}") from exc


def content_hash(raw: bytes) -> str:
    """Return a sha256 hex digest of the message that ignores what mail clients rewrite when mail is read."""
    data, lone_cr = _without_cr(raw)
    if lone_cr:
        data = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    # An mbox envelope line is written by whichever tool stored the message, not by its sender.
    if data.startswith(b"From "):
        newline = data.find(b"\n")
        data = data[newline + 1 :] if newline != -1 else b""
    end = data.find(b"\n\n")
    head, body = (data, b"") if end == -1 else (data[: end + 1], data[end + 1 :])
    lowered = head.lower()
    if b"status" in lowered or b"x-uid" in lowered or b"x-keywords" in lowered or b"content-length" in lowered:
        head = _VOLATILE_HEADERS.sub(b"", head)
    return hashlib.sha256((head + body).rstrip()).hexdigest()


_last_without_cr: tuple[bytes, bytes, bool] = (b"", b"", False)


def _without_cr(raw: bytes) -> tuple[bytes, bool]:
    """raw without its CRs, and whether some CR does not begin a CRLF (the last answer is kept: parsing a
    message asks twice)."""
    global _last_without_cr
    last = _last_without_cr
    if last[0] is raw:
        return last[1], last[2]
    data = raw.replace(b"\r", b"") if b"\r" in raw else raw  # much faster than replacing CRLF
    lone_cr = data is not raw and len(raw) - len(data) != raw.count(b"\r\n")
    _last_without_cr = (raw, data, lone_cr)
    return data, lone_cr


def _check_looks_like_message(raw: bytes) -> None:
    if not raw or raw.isspace():
        raise MessageParseError("empty input")
    start = 0
    if raw.startswith(b"From "):
        newline = raw.find(b"\n")
        start = len(raw) if newline == -1 else newline + 1
    if not _HEADER_LINE.match(raw, start):
        raise MessageParseError("no header block")


def _build_message(msg: Message, raw: bytes) -> ParsedMessage:
    values = wanted_headers(msg)
    hint = header_hint(msg, values)
    attachments: list[ParsedAttachment] = []
    texts, htmls = _collect(msg, attachments, depth=0, is_root=True)
    html_body = "\n".join(htmls)
    text_body = _body_text(texts, html_body)

    senders = addresses(values.get("from"), hint)
    message_ids = parse_message_ids(first_value(values, "message-id"), require_at=False)
    in_reply_to = parse_message_ids(first_value(values, "in-reply-to"), require_at=True)
    references = list(dict.fromkeys(parse_message_ids(" ".join(values.get("references", ())), require_at=True)))
    headers = {}
    for name in KEPT_HEADERS:
        if name in values:
            headers[name] = collapse_whitespace(decode_header(values[name][0], hint))
    return ParsedMessage(
        message_id=message_ids[0] if message_ids else "",
        in_reply_to=in_reply_to[0] if in_reply_to else "",
        references=references,
        subject=collapse_whitespace(decode_header(first_value(values, "subject"), hint)),
        sender=senders[0] if senders else None,
        to=addresses(values.get("to"), hint),
        cc=addresses(values.get("cc"), hint),
        bcc=addresses(values.get("bcc"), hint),
        reply_to=addresses(values.get("reply-to"), hint),
        date=parse_date(decode_header(first_value(values, "date"), hint)),
        text_body=text_body,
        html_body=html_body,
        snippet=_snippet(text_body),
        size=len(raw),
        content_hash=content_hash(raw),
        attachments=attachments,
        headers=headers,
    )


def _collect(
    part: Message, attachments: list[ParsedAttachment], depth: int, is_root: bool
) -> tuple[list[str], list[str]]:
    """Walk a MIME tree: return (text/plain bodies, HTML bodies) and append everything else to attachments."""
    content_type = part.get_content_type()
    if part.is_multipart():
        if not content_type.startswith("multipart/"):
            attachments.append(_message_attachment(part, content_type, len(attachments) + 1, depth))
            return [], []
        if depth >= _MAX_DEPTH:
            return [], []
        return _collect_multipart(part, content_type, attachments, depth)
    type_params = mime_params(part, "content-type")[1]
    disposition, disposition_params = mime_params(part, "content-disposition")
    filename = disposition_params.get("filename") or type_params.get("name") or None
    charset = type_params.get("charset")
    if disposition != "attachment" and (filename is None or is_root):
        if content_type == "text/plain":
            return [normalize_newlines(decode_bytes(_payload(part), charset))], []
        if content_type == "text/html":
            return [], [normalize_newlines(decode_html(_payload(part), charset))]
    content = _payload(part)
    attachment = ParsedAttachment(
        filename=_safe_filename(filename, content_type, len(attachments) + 1),
        content_type=content_type,
        content=content,
        size=len(content),
        extracted_text=_attachment_text(content, content_type, charset),
        inline=disposition != "attachment" and bool(part.get("content-id")),
    )
    attachments.append(attachment)
    return [], []


def _collect_multipart(
    part: Message, content_type: str, attachments: list[ParsedAttachment], depth: int
) -> tuple[list[str], list[str]]:
    texts: list[str] = []
    htmls: list[str] = []
    for child in _message_children(part.get_payload()):
        child_texts, child_htmls = _collect(child, attachments, depth + 1, is_root=False)
        if content_type == "multipart/alternative":
            # Alternatives repeat the same content: keep the first plain text with substance and the
            # last (richest, per RFC 2046) HTML rendering.
            if child_texts and not any(text.strip() for text in texts):
                texts = child_texts
            if child_htmls:
                htmls = child_htmls
        else:
            texts.extend(child_texts)
            htmls.extend(child_htmls)
    return texts, htmls


def _body_text(texts: list[str], html_body: str) -> str:
    text = "\n\n".join(stripped for text in texts if (stripped := text.strip("\n").rstrip()))
    if not text.strip() and html_body:
        return html_to_text(html_body)
    return text


def _attachment_text(content: bytes, content_type: str, charset: str | None) -> str:
    if not _is_text_like(content_type):
        return ""
    if content_type == "text/html":
        return html_to_text(decode_html(content, charset))
    return normalize_newlines(decode_bytes(content, charset))


def _message_attachment(part: Message, content_type: str, number: int, depth: int) -> ParsedAttachment:
    """Turn a message/* part (which the parser has already parsed into sub-messages) into an attachment."""
    inner_parts = _message_children(part.get_payload())
    if content_type not in _NESTED_MESSAGE_TYPES or not inner_parts or depth >= _MAX_DEPTH:
        content = b"".join(_message_bytes(child) for child in inner_parts)
        disposition_params = mime_params(part, "content-disposition")[1]
        filename = disposition_params.get("filename") or mime_params(part, "content-type")[1].get("name")
        return ParsedAttachment(
            filename=_safe_filename(filename, content_type, number),
            content_type=content_type,
            content=content,
            size=len(content),
            extracted_text=_attachment_text(content, content_type, None),
            inline=False,
        )
    inner = inner_parts[0]
    content = _message_bytes(inner)
    cte = str(part.get("content-transfer-encoding", "")).lower()
    if cte in ("base64", "quoted-printable"):
        # Forbidden by RFC 2046 but sent anyway: the parser read the encoded text as a message.
        content = _decode_transfer_encoding(content, cte)
        inner = _PARSER.parsebytes(content)
    values = wanted_headers(inner)
    hint = header_hint(inner, values)
    inner_attachments: list[ParsedAttachment] = []
    texts, htmls = _collect(inner, inner_attachments, depth + 1, is_root=True)
    subject = collapse_whitespace(decode_header(first_value(values, "subject"), hint))
    lines = []
    senders = addresses(values.get("from"), hint)
    if senders:
        sender = senders[0]
        lines.append(f"From: {sender.name} <{sender.address}>" if sender.name else f"From: {sender.address}")
    if date := collapse_whitespace(decode_header(first_value(values, "date"), hint)):
        lines.append(f"Date: {date}")
    if subject:
        lines.append(f"Subject: {subject}")
    if inner_attachments:
        lines.append("Attachments: " + ", ".join(attachment.filename for attachment in inner_attachments))
    summary = "\n".join(lines)
    if body := _body_text(texts, "\n".join(htmls)):
        summary = f"{summary}\n\n{body}" if summary else body
    return ParsedAttachment(
        # A subject is not a path: keep all of it rather than its last "/" component.
        filename=_safe_filename(_SLASHES.sub("-", f"{subject}.eml") if subject else None, content_type, number),
        content_type=content_type,
        content=content,
        size=len(content),
        extracted_text=summary,
        inline=False,
    )


def _message_bytes(msg: Message) -> bytes:
    """Serialize a parsed sub-message as close to its original bytes as the email package allows."""
    try:
        return msg.as_bytes()
    except RecursionError:
        return b""  # nesting hundreds of levels deep: only hostile mail gets here
    except UnicodeError:
        pass
    # The bytes generator fails on some malformed structures (a multipart without a usable boundary
    # holding 8-bit text); the text generator copes with most, at the cost of U+FFFD for undecodable bytes.
    try:
        return msg.as_string().encode("utf-8", "surrogateescape")
    except UnicodeError:
        return b""


def _decode_transfer_encoding(data: bytes, cte: str) -> bytes:
    if cte == "quoted-printable":
        return binascii.a2b_qp(data)
    try:
        return binascii.a2b_base64(b"".join(data.split()))
    except binascii.Error:
        return data


def _message_children(payload: object) -> list[Message]:
    return [child for child in payload if isinstance(child, Message)] if isinstance(payload, list) else []


def _payload(part: Message) -> bytes:
    payload = part.get_payload(decode=True)
    return payload if isinstance(payload, bytes) else b""


def _is_text_like(content_type: str) -> bool:
    return (
        content_type.startswith("text/")
        or content_type in _TEXT_LIKE_TYPES
        or (content_type.startswith("application/") and content_type.endswith(("+json", "+xml")))
    )


def _safe_filename(filename: str | None, content_type: str, number: int) -> str:
    """Return a filename without directories or control characters, or a generated one."""
    name = ""
    if filename:
        # Clients on Windows send full paths; keep only the last component.
        name = filename.replace("\\", "/").rsplit("/", 1)[-1]
        name = "".join(char for char in name if char >= " " and not "\x7f" <= char <= "\x9f")
        name = " ".join(name.split()).strip(". ")
        if len(name) > _MAX_FILENAME:
            _stem, dot, extension = name.rpartition(".")
            suffix = "." + extension if dot and len(extension) <= 16 else ""
            name = name[: _MAX_FILENAME - len(suffix)].rstrip() + suffix
    if name:
        return name
    return f"attachment-{number}{_extension(content_type)}"


def _extension(content_type: str) -> str:
    if content_type in _NESTED_MESSAGE_TYPES:
        return ".eml"
    return _mime_types().guess_extension(content_type) or ".bin"


@lru_cache(maxsize=1)
def _mime_types() -> MimeTypes:
    # A private table built from Python's defaults only, so that extensions do not depend on the host's
    # /etc/mime.types.
    return MimeTypes()


def _snippet(text: str) -> str:
    # Collapse only as much of the body as the snippet needs, growing the window when whitespace eats it.
    window = _SNIPPET_LENGTH + 40
    while True:
        chunk = text[:window]
        words = chunk.split()
        if window >= len(text):
            return " ".join(words)[:_SNIPPET_LENGTH]
        if words and not chunk[-1].isspace():
            words.pop()  # may be cut in the middle
        collapsed = " ".join(words)
        if len(collapsed) >= _SNIPPET_LENGTH:
            return collapsed[:_SNIPPET_LENGTH]
        window *= 4


# the reason given for a message over the import limit (IMPORT_MAX_MESSAGE_BYTES)
TOO_LARGE = "message larger than the import limit"


def parse_or_reason(data: bytes, max_bytes: int) -> ParsedMessage | str:
    """The parsed message, or a fixed reason (never mail content) why it cannot be imported.

    Module-level and free of Django so that a pool of parser processes can run it.
    """
    if len(data) > max_bytes:
        return TOO_LARGE
    try:
        return parse_message(data)
    except MessageParseError as exc:
        return exc.reason
