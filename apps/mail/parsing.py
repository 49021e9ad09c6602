"""Turn the raw bytes of one RFC 5322 message into a ParsedMessage.

Real mail is often broken: wrong or unknown charsets, raw 8-bit headers, defective encoded words,
HTML-only bodies. Everything here decodes leniently and never raises for such input; only bytes that
are not a message at all raise MessageParseError.
"""

import binascii
import codecs
import contextlib
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email import utils as email_utils
from email.message import Message
from email.parser import BytesParser
from email.policy import EmailPolicy
from functools import lru_cache
from html import unescape
from html.parser import HTMLParser
from mimetypes import MimeTypes

from apps.mail.mimetree import build_tree

__all__ = [
    "Address",
    "MessageParseError",
    "ParsedAttachment",
    "ParsedMessage",
    "content_hash",
    "html_to_text",
    "normalize_subject",
    "parse_message",
]


@dataclass(frozen=True, slots=True)
class Address:
    """One mailbox from an address header."""

    name: str
    address: str


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

_ADDRESS_HEADERS = ("from", "to", "cc", "bcc", "reply-to")
_KEPT_HEADERS = ("list-id", "list-unsubscribe", "auto-submitted", "precedence", "x-mailer")
_WANTED_HEADERS = frozenset(
    (*_ADDRESS_HEADERS, *_KEPT_HEADERS, "subject", "date", "message-id", "in-reply-to", "references")
)
# MIME trees are not walked deeper than this (a message/* part there is kept only as bytes): real mail
# never nests this far, and hostile mail must not exhaust the stack.
_MAX_DEPTH = 24
_SNIPPET_LENGTH = 200
_MAX_FILENAME = 200
_MAX_PARAMS_HEADER = 16384

_HEADER_LINE = re.compile(rb"[\x21-\x39\x3b-\x7e]+[ \t]*:")
_VOLATILE_HEADERS = re.compile(
    rb"^(?:status|x-status|x-mozilla-status2?|x-uid|x-keywords|content-length)[ \t]*:.*(?:\n[ \t].*)*\n?",
    re.IGNORECASE | re.MULTILINE,
)
# Encoded text may not contain "?"; spaces are tolerated because broken encoders leave them in.
_ENCODED_WORD = re.compile(r"=\?([^?\s]+)\?([bBqQ])\?([^?]*)\?=")
_ADDR_SPEC = r"[^\s<>()\[\]\\,;:\"@]+@[^\s<>()\[\]\\,;:\"@]+"
_SIMPLE_MAILBOX = re.compile(
    rf"""\s*(?:
        "((?:[^"\\]|\\.)*)" \s* <({_ADDR_SPEC})>     # "Quoted Name" <addr>
      | ([^<>()\[\]\\,;:"@]*?) \s* <({_ADDR_SPEC})>  # Plain Name <addr>, or just <addr>
      | ({_ADDR_SPEC})                               # addr
    )\s*(?:,|\Z)""",
    re.VERBOSE,
)
_QUOTED_PAIR = re.compile(r"\\(.)")
_MIME_PARAM = re.compile(r';\s*([^\s=;]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;]*))')
_SIMPLE_DATE = re.compile(
    r"(?:[A-Za-z]{3},\s*)?(\d{1,2})\s+([A-Za-z]{3})\s+(\d{4})\s+(\d{2}):(\d{2})(?::(\d{2}))?\s+([+-])(\d{2})(\d{2})"
    r"(?:\s*\([^()]*\))?"
)
_MONTHS = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1
    )
}
_SLASHES = re.compile(r"[/\\]")
_MSG_ID = re.compile(r"<([^<>]*)>")
_META_CHARSET = re.compile(rb"<meta[^>]{0,200}?charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:-]+)", re.IGNORECASE)
_SUBJECT_PREFIX = re.compile(
    r"(?:(?:re|fwd?|aw|wg|sv|vs|antw|ref|tr|rif|odp|rv|enc|回复|回覆|答复|转发|轉寄)"
    r"\s*(?:\[\d+\]|\(\d+\)|\^\d+)?\s*[:\uff1a]|\[[^\[\]]*\])\s*",
    re.IGNORECASE,
)

# Labels mail software uses for what is really a superset encoding (as in the WHATWG encoding standard):
# decoding with the superset loses nothing and fixes the common mislabelling.
_SUPERSETS = {
    "ascii": "cp1252",
    "iso8859_1": "cp1252",
    "iso8859_9": "cp1254",
    "iso8859_11": "cp874",
    "tis_620": "cp874",
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "shift_jis": "cp932",
    "euc_kr": "cp949",
}
# Labels seen in mail that Python's codec registry does not know.
_LABEL_ALIASES = {
    "x-sjis": "cp932",
    "windows-31j": "cp932",
    "windows-874": "cp874",
    "iso-8859-8-i": "iso8859_8",
    "x-gbk": "gbk",
}
_MULTIBYTE = frozenset(
    {
        "big5",
        "big5hkscs",
        "cp932",
        "cp949",
        "cp950",
        "euc_jis_2004",
        "euc_jisx0213",
        "euc_jp",
        "gb18030",
        "johab",
        "shift_jis_2004",
        "shift_jisx0213",
    }
)
# Text codecs that are transformations, not charsets a mail could be written in.
_NOT_CHARSETS = frozenset({"idna", "punycode", "unicode-escape", "raw-unicode-escape", "charmap", "undefined"})
# 7-bit or wide encodings: pure-ASCII bytes do not mean ASCII text for these.
_NOT_ASCII_COMPATIBLE = ("iso2022", "utf_7", "utf_16", "utf_32", "hz")
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
_USED_PARAMS = frozenset({"charset", "name", "filename"})


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


# threading asks for the same subjects (a conversation's) again and again
@lru_cache(maxsize=4096)
def normalize_subject(subject: str) -> str:
    """Strip reply/forward prefixes and list tags, collapse whitespace and casefold, for thread matching."""
    text = " ".join(subject.split())
    while match := _SUBJECT_PREFIX.match(text):
        text = text[match.end() :]
    return text.casefold()


def html_to_text(html: str) -> str:
    """Render HTML as readable plain text, keeping link targets, alt text, lists, tables and <pre>."""
    extractor = _TextExtractor()
    if _feed_plain_html(extractor, html):
        return extractor.text()
    extractor = _TextExtractor()
    extractor.feed(html)
    extractor.close()
    return extractor.text()


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
    values = _wanted_headers(msg)
    hint = _header_hint(msg, values)
    attachments: list[ParsedAttachment] = []
    texts, htmls = _collect(msg, attachments, depth=0, is_root=True)
    html_body = "\n".join(htmls)
    text_body = _body_text(texts, html_body)

    senders = _addresses(values.get("from"), hint)
    message_ids = _message_ids(_first(values, "message-id"), require_at=False)
    in_reply_to = _message_ids(_first(values, "in-reply-to"), require_at=True)
    references = list(dict.fromkeys(_message_ids(" ".join(values.get("references", ())), require_at=True)))
    headers = {}
    for name in _KEPT_HEADERS:
        if name in values:
            headers[name] = _collapse(_decode_header(values[name][0], hint))
    return ParsedMessage(
        message_id=message_ids[0] if message_ids else "",
        in_reply_to=in_reply_to[0] if in_reply_to else "",
        references=references,
        subject=_collapse(_decode_header(_first(values, "subject"), hint)),
        sender=senders[0] if senders else None,
        to=_addresses(values.get("to"), hint),
        cc=_addresses(values.get("cc"), hint),
        bcc=_addresses(values.get("bcc"), hint),
        reply_to=_addresses(values.get("reply-to"), hint),
        date=_parse_date(_decode_header(_first(values, "date"), hint)),
        text_body=text_body,
        html_body=html_body,
        snippet=_snippet(text_body),
        size=len(raw),
        content_hash=content_hash(raw),
        attachments=attachments,
        headers=headers,
    )


def _wanted_headers(msg: Message) -> dict[str, list[str]]:
    """Collect the raw values of the headers we use, in one pass over the header list."""
    values: dict[str, list[str]] = {}
    for name, value in msg.raw_items():
        key = name.lower()
        if key in _WANTED_HEADERS:
            values.setdefault(key, []).append(value.replace("\r", "").replace("\n", "").strip())
    return values


def _header_hint(msg: Message, values: dict[str, list[str]]) -> str | None:
    """Return the charset to try for raw 8-bit header bytes: the one the message body declares."""
    if all(value.isascii() for found in values.values() for value in found):
        return None
    return _mime_params(msg, "content-type")[1].get("charset")


def _first(values: dict[str, list[str]], name: str) -> str:
    found = values.get(name)
    return found[0] if found else ""


# -- body and attachments ------------------------------------------------------------------------------


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
    type_params = _mime_params(part, "content-type")[1]
    disposition, disposition_params = _mime_params(part, "content-disposition")
    filename = disposition_params.get("filename") or type_params.get("name") or None
    charset = type_params.get("charset")
    if disposition != "attachment" and (filename is None or is_root):
        if content_type == "text/plain":
            return [_normalize_newlines(_decode_bytes(_payload(part), charset))], []
        if content_type == "text/html":
            return [], [_normalize_newlines(_decode_html(_payload(part), charset))]
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
        return html_to_text(_decode_html(content, charset))
    return _normalize_newlines(_decode_bytes(content, charset))


def _message_attachment(part: Message, content_type: str, number: int, depth: int) -> ParsedAttachment:
    """Turn a message/* part (which the parser has already parsed into sub-messages) into an attachment."""
    inner_parts = _message_children(part.get_payload())
    if content_type not in _NESTED_MESSAGE_TYPES or not inner_parts or depth >= _MAX_DEPTH:
        content = b"".join(_message_bytes(child) for child in inner_parts)
        disposition_params = _mime_params(part, "content-disposition")[1]
        filename = disposition_params.get("filename") or _mime_params(part, "content-type")[1].get("name")
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
    values = _wanted_headers(inner)
    hint = _header_hint(inner, values)
    inner_attachments: list[ParsedAttachment] = []
    texts, htmls = _collect(inner, inner_attachments, depth + 1, is_root=True)
    subject = _collapse(_decode_header(_first(values, "subject"), hint))
    lines = []
    senders = _addresses(values.get("from"), hint)
    if senders:
        sender = senders[0]
        lines.append(f"From: {sender.name} <{sender.address}>" if sender.name else f"From: {sender.address}")
    if date := _collapse(_decode_header(_first(values, "date"), hint)):
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


def _mime_params(part: Message, header: str) -> tuple[str | None, dict[str, str]]:
    """Return a MIME header's lower-cased main value and its decoded charset/name/filename parameters."""
    value = part.get(header)
    if value is None:
        return None, {}
    # Parameter parsing is quadratic in the worst case; no legitimate header comes close to this.
    value = value[:_MAX_PARAMS_HEADER]
    main, _, rest = value.partition(";")
    if "*" in rest:
        # RFC 2231 (name*=charset'lang'%XX, name*0=...): the email package joins the continuations.
        # decode_params() cannot sort a mix of name* and name*0* (TypeError); then read them plainly.
        rfc2231_params = None
        with contextlib.suppress(TypeError):
            rfc2231_params = part.get_params([], header)[1:]
        if rfc2231_params is not None:
            decoded: dict[str, str] = {}
            for name, param in rfc2231_params:
                key = name.strip().lower()
                if key in _USED_PARAMS and key not in decoded:
                    decoded[key] = _param_value(param)
            return main.strip().lower(), decoded
    main_value, params = _plain_mime_params(value, len(main))
    return main_value, dict(params)


# The same few Content-Type and Content-Disposition values come back in message after message.
@lru_cache(maxsize=1024)
def _plain_mime_params(value: str, params_start: int) -> tuple[str, dict[str, str]]:
    """_mime_params of a header value without RFC 2231 parameters (the dict is shared: copy it)."""
    decoded: dict[str, str] = {}
    # The email package's general parameter parser costs more than the rest of a simple message.
    for match in _MIME_PARAM.finditer(value, params_start):
        key = match.group(1).lower()
        if key in _USED_PARAMS and key not in decoded:
            quoted, plain = match.group(2, 3)
            # Only \\ and \" are unescaped, like email.utils.unquote: Windows clients send paths
            # such as "C:\Users\x.pdf" unescaped.
            raw = quoted.replace("\\\\", "\\").replace('\\"', '"') if quoted is not None else plain.strip().strip('"')
            decoded[key] = _decode_header(raw)
    return value[:params_start].strip().lower(), decoded


def _param_value(value: str | tuple[str | None, str | None, str]) -> str:
    """Decode a parameter value: RFC 2231 (charset'lang'%XX), encoded words, raw 8-bit bytes."""
    if isinstance(value, tuple):
        charset, _language, text = value
        try:
            data = text.encode("latin-1", "surrogateescape")
        except UnicodeEncodeError:
            return _decode_header(text)
        return _decode_bytes(data, charset)
    return _decode_header(value)


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


# -- charsets ------------------------------------------------------------------------------------------


@lru_cache(maxsize=256)
def _codec(label: str | None) -> str | None:
    """Return the Python codec to use for a charset label, or None when the label names no text encoding."""
    if not label:
        return None
    label = label.strip().strip("\"';").lower()
    if not label or len(label) > 40:
        return None
    try:
        name = codecs.lookup(_LABEL_ALIASES.get(label, label)).name
    except (LookupError, ValueError):
        return None
    try:
        # bytes.decode() refuses bytes-to-bytes codecs (base64, quopri, zlib) with LookupError, but only
        # when given some input.
        b"a".decode(name)
    except LookupError:
        return None
    except ValueError:
        pass  # a text codec that cannot decode this sample (UTF-16 needs two bytes)
    if name in _NOT_CHARSETS:
        return None
    name = name.replace("-", "_")
    return _SUPERSETS.get(name, name)


def _decode_bytes(data: bytes, charset: str | None) -> str:
    """Decode text: the declared charset if it fits, else UTF-8, else cp1252, else latin-1; never raises."""
    codec = _codec(charset)
    if codec is not None and codec.startswith(_NOT_ASCII_COMPATIBLE):
        try:
            return _strip_nul(data.decode(codec))
        except ValueError:
            if data.isascii():
                return _strip_nul(data.decode(codec, "replace"))
    elif data.isascii():
        return _strip_nul(data.decode("ascii"))
    if codec is None or codec == "utf_8":
        candidates: tuple[str, ...] = ("utf_8", "cp1252")
    elif codec in _MULTIBYTE or codec.startswith(_NOT_ASCII_COMPATIBLE):
        candidates = (codec, "utf_8", "cp1252")
    else:
        # Valid non-ASCII UTF-8 is practically never legacy single-byte text, so it wins over such a
        # declaration (the usual mislabelling: UTF-8 sent as iso-8859-1).
        candidates = ("utf_8", codec, "cp1252")
    for candidate in candidates:
        try:
            return _strip_nul(data.decode(candidate))
        except ValueError:  # UnicodeDecodeError, or UnicodeError from codecs such as utf-7
            continue
    return _strip_nul(data.decode("latin-1"))


def _decode_html(data: bytes, charset: str | None) -> str:
    if charset is None and not data.isascii() and (match := _META_CHARSET.search(data, 0, 4096)):
        charset = match.group(1).decode("ascii")
    return _decode_bytes(data, charset)


def _strip_nul(text: str) -> str:
    # NUL cannot be stored in PostgreSQL text columns and never carries meaning in mail text.
    return text.replace("\x00", "") if "\x00" in text else text


def _normalize_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


# -- headers -------------------------------------------------------------------------------------------


def _unescape_8bit(text: str, hint: str | None) -> str:
    """Decode header text that may hold raw 8-bit bytes (surrogate-escaped by the parser)."""
    if text.isascii():
        return _strip_nul(text)
    return _decode_bytes(text.encode("utf-8", "surrogateescape"), hint)


def _decode_header(value: str, hint: str | None = None) -> str:
    """Decode RFC 2047 encoded words and raw 8-bit bytes in a header value; never raises."""
    if "=?" not in value:
        return _unescape_8bit(value, hint)
    out: list[str] = []
    pending = bytearray()
    pending_charset: str | None = None
    last_was_word = False
    position = 0

    def flush() -> None:
        nonlocal pending_charset
        if pending_charset is not None:
            out.append(_decode_bytes(bytes(pending), pending_charset))
            pending.clear()
            pending_charset = None

    for match in _ENCODED_WORD.finditer(value):
        gap = value[position : match.start()]
        position = match.end()
        # RFC 2047 6.2: whitespace between two encoded words is not part of the text.
        if gap and not (last_was_word and gap.isspace()):
            flush()
            out.append(_unescape_8bit(gap, hint))
        charset = match.group(1).split("*", 1)[0].lower()
        data = _decode_word(match.group(2), match.group(3))
        if data is None:
            flush()
            out.append(_unescape_8bit(match.group(0), hint))
            last_was_word = False
            continue
        # Encoders split multi-byte characters across adjacent words, so decode those words together.
        if pending_charset is not None and pending_charset != charset:
            flush()
        pending_charset = charset
        pending.extend(data)
        last_was_word = True
    flush()
    out.append(_unescape_8bit(value[position:], hint))
    return _strip_nul("".join(out))


def _decode_word(encoding: str, text: str) -> bytes | None:
    data = text.encode("utf-8", "surrogateescape")
    if encoding in "qQ":
        return binascii.a2b_qp(data, header=True)
    data = b"".join(data.split())
    data += b"=" * (-len(data) % 4)
    try:
        return binascii.a2b_base64(data)
    except binascii.Error:
        return None


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _addresses(values: Iterable[str] | None, hint: str | None) -> list[Address]:
    if not values:
        return []
    return [address for value in values for address in _address_list(value, hint)]


# The same few address lists (the mailbox owner, frequent correspondents) recur across a mailbox.
@lru_cache(maxsize=4096)
def _address_list(value: str, hint: str | None) -> tuple[Address, ...]:
    """Parse one address header value into Addresses, dropping entries without a usable addr-spec."""
    result = []
    for name, raw_address in _split_addresses(value):
        address = _unescape_8bit(raw_address.strip(), hint).lower()
        local, at, domain = address.rpartition("@")
        if not at or not local or not domain or len(address.split()) != 1:
            continue
        result.append(Address(name=_collapse(_decode_header(name, hint)), address=address))
    return tuple(result)


def _split_addresses(value: str) -> list[tuple[str, str]]:
    """Split an address header value into (raw display name, raw addr-spec) pairs."""
    # Nearly all real headers are plain `Name <addr>` lists, which a regex splits several times faster
    # than getaddresses(); anything else (groups, comments, obsolete syntax) goes to getaddresses().
    pairs: list[tuple[str, str]] = []
    position = 0
    while position < len(value):
        match = _SIMPLE_MAILBOX.match(value, position)
        if match is None or match.end() == position:
            return email_utils.getaddresses([value])
        quoted, quoted_address, phrase, phrase_address, bare = match.groups()
        if quoted is not None:
            pairs.append((_QUOTED_PAIR.sub(r"\1", quoted), quoted_address))
        elif phrase is not None:
            pairs.append((phrase, phrase_address))
        else:
            pairs.append(("", bare))
        position = match.end()
    return pairs


def _message_ids(value: str, require_at: bool) -> list[str]:
    """Return the msg-ids in a header value, without angle brackets."""
    if not value:
        return []
    value = _unescape_8bit(value, None)
    ids = [joined for found in _MSG_ID.findall(value) if (joined := "".join(found.split()))]
    if ids or "<" in value:
        return ids
    # Some software omits the brackets.
    tokens = value.split()
    if require_at:
        return [token for token in tokens if "@" in token]
    return tokens[:1]


@lru_cache(maxsize=256)
def _zone_offset(sign: str, hours: str, minutes: str) -> timedelta:
    """A zone's offset east of UTC (the few zones of a mailbox come back in every date)."""
    offset = timedelta(hours=int(hours), minutes=int(minutes))
    return offset if sign == "+" else -offset


def _parse_date(value: str) -> datetime | None:
    if not value:
        return None
    # The common well-formed case without the email package's general (and slower) date parser.
    match = _SIMPLE_DATE.fullmatch(value)
    if match and (month := _MONTHS.get(match.group(2).lower())):
        day, _, year, hour, minute, second, sign, zone_hours, zone_minutes = match.groups()
        try:
            local = datetime(int(year), month, int(day), int(hour), int(minute), int(second or 0), tzinfo=UTC)
            return local - _zone_offset(sign, zone_hours, zone_minutes)
        except (ValueError, OverflowError):
            pass
    try:
        parsed = email_utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
    if parsed.tzinfo is None:
        # RFC 5322 "-0000" (and ISO dates without an offset): the zone is unknown, UTC is the best guess.
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        return None


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


# -- HTML ----------------------------------------------------------------------------------------------

_SKIPPED_TAGS = frozenset({"script", "style", "template"})
_HEAD_TAGS = frozenset({"html", "head", "meta", "link", "title", "base", "style", "script", "noscript", "template"})
_PARAGRAPH_TAGS = frozenset({"p", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "hr", "pre", "dl"})
_BLOCK_TAGS = frozenset(
    {
        "address",
        "article",
        "aside",
        "caption",
        "center",
        "dd",
        "details",
        "dialog",
        "div",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "header",
        "hgroup",
        "legend",
        "main",
        "nav",
        "section",
        "summary",
        "tbody",
        "tfoot",
        "thead",
    }
)
_HTML_SPACE = re.compile(r"[ \t\n\r\f]+")
_IGNORED_LINK_PREFIXES = ("#", "javascript:")


class _TextExtractor(HTMLParser):
    """Collects readable text from HTML, tracking just enough structure for line breaks."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._parts: list[str] = []
        self._last = ""  # last character written, '' at the start
        self._trailing_newlines = 0
        self._pending_space = False
        self._pending_separator = False
        self._skip = 0
        self._in_head = False
        self._in_title = False
        self._pre = 0
        self._pre_started = False
        self._lists = 0
        self._cells: list[int] = []
        self._links: list[tuple[str, int]] = []

    def text(self) -> str:
        """Return the collected text with blank-line runs collapsed."""
        while self._links:
            self._end_link()
        lines: list[str] = []
        for line in "".join(self._parts).replace("\xa0", " ").split("\n"):
            line = line.rstrip()
            if line or (lines and lines[-1]):
                lines.append(line)
        return "\n".join(lines).strip("\n")

    def parse_marked_section(self, i: int, report: bool = True) -> int:
        """Treat unknown <![...]> sections as bogus comments, as browsers do, instead of failing."""
        try:
            return super().parse_marked_section(i, report)
        except AssertionError:
            end = self.rawdata.find(">", i)
            return len(self.rawdata) if end == -1 else end + 1

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Open an element."""
        if tag in _SKIPPED_TAGS:
            self._skip += 1
            return
        if tag == "head":
            self._in_head = True
            return
        if tag == "title":
            self._in_head = self._in_title = True
            return
        if tag not in _HEAD_TAGS:
            self._in_head = self._in_title = False
        if self._skip or self._in_head:
            return
        if tag == "br":
            self._write("\n")
        elif tag in _PARAGRAPH_TAGS:
            self._break(2)
            if tag == "pre":
                self._pre += 1
                self._pre_started = True
        elif tag in _BLOCK_TAGS:
            self._break(1)
        elif tag in ("ul", "ol"):
            self._break(1)
            self._lists += 1
        elif tag == "li":
            self._break(1)
            self._write("  " * max(self._lists - 1, 0) + "- ")
        elif tag == "table":
            self._break(1)
            self._cells.append(0)
        elif tag == "tr":
            self._break(1)
            if self._cells:
                self._cells[-1] = 0
        elif tag in ("td", "th"):
            if self._cells:
                self._pending_separator = self._cells[-1] > 0
                self._cells[-1] += 1
        elif tag == "a":
            if self._links:
                self._end_link()
            href = dict(attrs).get("href") or ""
            self._links.append((href.strip(), len(self._parts)))
        elif tag == "img":
            alt = _collapse(dict(attrs).get("alt") or "")
            if alt:
                self._inline(f" {alt} ")

    def handle_endtag(self, tag: str) -> None:
        """Close an element."""
        if tag in _SKIPPED_TAGS:
            self._skip = max(self._skip - 1, 0)
            return
        if tag in ("head", "title"):
            self._in_title = False
            self._in_head = self._in_head and tag != "head"
            return
        if self._skip or self._in_head:
            return
        if tag in _PARAGRAPH_TAGS:
            if tag == "pre":
                self._pre = max(self._pre - 1, 0)
            self._break(2)
        elif tag in _BLOCK_TAGS or tag in ("li", "tr"):
            self._break(1)
        elif tag in ("ul", "ol"):
            self._lists = max(self._lists - 1, 0)
            self._break(1)
        elif tag == "table":
            if self._cells:
                self._cells.pop()
            self._break(1)
        elif tag == "a" and self._links:
            self._end_link()

    def handle_data(self, data: str) -> None:
        """Add text, collapsing whitespace outside <pre>."""
        if self._skip:
            return
        if self._in_head:
            if self._in_title or data.isspace():
                return
            self._in_head = False
        if self._pre:
            if self._pre_started and data.startswith("\n"):
                data = data[1:]
            self._pre_started = False
            self._inline_raw(_normalize_newlines(data))
        else:
            # (most text has single spaces only, which the substitution would leave as they are)
            collapse = "  " in data or "\n" in data or "\t" in data or "\r" in data or "\f" in data
            self._inline(_HTML_SPACE.sub(" ", data) if collapse else data)

    def _end_link(self) -> None:
        href, start = self._links.pop()
        if not href or href.startswith(_IGNORED_LINK_PREFIXES):
            return
        label = _collapse("".join(self._parts[start:]))
        if not label:
            self._inline(f" {href} ")
        elif not _same_target(label, href):
            self._inline(f" ({href}) ")

    def _inline(self, text: str) -> None:
        """Write collapsed text, where a leading or trailing ' ' only asks for a word break."""
        core = text.strip(" ")
        if not core:
            if text and self._last not in ("", "\n", " "):
                self._pending_space = True
            return
        if self._pending_separator:
            self._pending_separator = False
            if self._last not in ("", "\n"):
                self._write("| " if self._last == " " else " | ")
                self._pending_space = False
        if (self._pending_space or text[0] == " ") and self._last not in ("", "\n", " "):
            core = " " + core
        self._write(core)
        self._pending_space = text[-1] == " "

    def _inline_raw(self, text: str) -> None:
        if not text:
            return
        if self._pending_space and self._last not in ("", "\n", " "):
            self._write(" ")
        self._pending_space = self._pending_separator = False
        self._write(text)

    def _break(self, newlines: int) -> None:
        self._pending_space = self._pending_separator = False
        if self._last and self._trailing_newlines < newlines:
            self._write("\n" * (newlines - self._trailing_newlines))

    def _write(self, text: str) -> None:
        self._parts.append(text)
        stripped = text.rstrip("\n")
        if not stripped:
            self._trailing_newlines += len(text)
        else:
            self._trailing_newlines = len(text) - len(stripped)
        self._last = text[-1]


# Markup that html.parser reads the same way in every Python version: text, comments without "--" in them,
# start tags with plain attributes, end tags, doctypes. Anything else (a lone "<", bogus comments, <? ?>,
# <![ ]]>, unquoted values with quotes or "=", attributes without a blank before them) matches the last
# alternative, and the HTML is left to html.parser itself.
_ATTRIBUTE = (
    r"""[ \t\n\r\f]+([a-zA-Z_:][-a-zA-Z0-9_:.]*)"""
    r"""(?:[ \t\n\r\f]*=[ \t\n\r\f]*("[^"]*"|'[^']*'|[^\s"'=<>`]+))?"""
)
_HTML_TOKEN = re.compile(
    r"([^<]+)"  # 1: text
    r"|<!--(.*?)-->"  # 2: a comment
    r"|<([a-zA-Z][a-zA-Z0-9]*)((?:" + _ATTRIBUTE.replace("(", "(?:").replace("(?:?:", "(?:") + r")*)[ \t\n\r\f]*(/?)>"
    r"|</([a-zA-Z][a-zA-Z0-9]*)[ \t\n\r\f]*>"  # 6: an end tag
    r"|(<![dD][oO][cC][tT][yY][pP][eE][^>]*>)"  # 7: a doctype
    r"|(<)",  # 8: anything else
    re.DOTALL,
)
_PLAIN_ATTR = re.compile(_ATTRIBUTE)
# token.lastindex: the last group that matched (for start tags the always-matching "/?")
_TEXT, _COMMENT, _START, _END, _DOCTYPE, _OTHER = 1, 2, 5, 6, 7, 8
# Elements whose content some versions of html.parser read as raw text (not markup, entities kept): read
# here only when their content is text without markup followed by their end tag, and without entities
# unless the text is not shown anyway.
_RAW_TEXT_TAGS = frozenset(
    {"script", "style", "title", "textarea", "xmp", "iframe", "noembed", "noframes", "noscript", "plaintext"}
)
_UNSHOWN_RAW_TEXT_TAGS = frozenset({"script", "style", "title"})


def _feed_plain_html(extractor: HTMLParser, html: str) -> bool:
    """Make the handler calls html.parser would make for this HTML, reading it faster; False (having made some
    of them) when the HTML has markup left to html.parser."""
    data, start, end = extractor.handle_data, extractor.handle_starttag, extractor.handle_endtag
    find, match = html.find, _HTML_TOKEN.match
    position, length = 0, len(html)
    while position < length:
        bracket = find("<", position)
        if bracket == -1:
            bracket = length
        if bracket > position:
            text = html[position:bracket]
            data(unescape(text) if "&" in text else text)
            if bracket == length:
                break
        # <name> and </name> are most tags: told apart without the regular expression
        close = find(">", bracket)
        inner = html[bracket + 1 : close] if close != -1 else ""
        if inner.isalnum() and inner.isascii() and inner[0].isalpha():
            name = inner.lower()
            start(name, [])
            position = close + 1
        elif inner[:1] == "/" and inner[1:].isalnum() and inner.isascii() and inner[1].isalpha():
            end(inner[1:].lower())
            position = close + 1
            continue
        else:
            token = match(html, bracket)
            assert token is not None  # the last alternative matches any "<"
            kind, position = token.lastindex, token.end()
            if kind == _END:
                end(token.group(6).lower())
                continue
            if kind == _COMMENT:
                # html.parser's idea of where a comment ends changed between versions, except for these
                body = token.group(2)
                if "--" in body or body.startswith((">", "->")):
                    return False
                continue
            if kind != _START:
                if kind == _OTHER:
                    return False
                continue  # a doctype
            name = token.group(3).lower()
            attrs: list[tuple[str, str | None]] = []
            if token.group(4):
                for attribute in _PLAIN_ATTR.finditer(token.group(4)):
                    value: str | None = attribute.group(2)
                    if value is not None and value[:1] in ("'", '"'):
                        value = value[1:-1]
                    if value:
                        value = unescape(value)
                    attrs.append((attribute.group(1).lower(), value))
            start(name, attrs)
            if token.group(5):
                end(name)
                continue
        if name in _RAW_TEXT_TAGS:
            # the element's text, up to its own end tag
            if name == "plaintext":
                return False
            content_end = find("<", position)
            closing = match(html, content_end) if content_end != -1 else None
            if closing is None or closing.lastindex != _END or closing.group(6).lower() != name:
                return False
            content = html[position:content_end]
            if "&" in content and name not in _UNSHOWN_RAW_TEXT_TAGS:
                return False
            if content:
                # html.parser passes script and style content as it is, other text unescaped
                data(content if name in ("script", "style") else unescape(content))
            end(name)
            position = closing.end()
    return True


def _same_target(label: str, href: str) -> bool:
    """Whether showing the href next to the label would only repeat it."""
    target = href
    for prefix in ("mailto:", "tel:", "https://", "http://"):
        if target.lower().startswith(prefix):
            target = target[len(prefix) :]
            break
    return label in (href, target) or label.rstrip("/") in (href.rstrip("/"), target.rstrip("/"))


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
