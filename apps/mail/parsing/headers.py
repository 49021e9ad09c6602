"""Reading header values: encoded words and raw 8-bit bytes, addresses, message ids, dates, MIME parameters,
and the subject as threading compares it."""

import binascii
import contextlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email import utils as email_utils
from email.message import Message
from functools import lru_cache

from apps.mail.parsing.charsets import decode_bytes, strip_nul
from apps.mail.parsing.whitespace import collapse_whitespace

_ADDRESS_HEADERS = ("from", "to", "cc", "bcc", "reply-to")
# x-oaken-forwarded: the mark an automatic forward carries (apps.outbound.automations), so it is never forwarded again
KEPT_HEADERS = ("list-id", "list-unsubscribe", "auto-submitted", "precedence", "x-mailer", "x-oaken-forwarded")
_WANTED_HEADERS = frozenset(
    (*_ADDRESS_HEADERS, *KEPT_HEADERS, "subject", "date", "message-id", "in-reply-to", "references")
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
_MSG_ID = re.compile(r"<([^<>]*)>")
_SUBJECT_PREFIX = re.compile(
    r"(?:(?:re|fwd?|aw|wg|sv|vs|antw|ref|tr|rif|odp|rv|enc|回复|回覆|答复|转发|轉寄)"
    r"\s*(?:\[\d+\]|\(\d+\)|\^\d+)?\s*[:\uff1a]|\[[^\[\]]*\])\s*",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Address:
    """One mailbox from an address header."""

    name: str
    address: str


# threading asks for the same subjects (a conversation's) again and again
@lru_cache(maxsize=4096)
def normalize_subject(subject: str) -> str:
    """Strip reply/forward prefixes and list tags, collapse whitespace and casefold, for thread matching."""
    text = " ".join(subject.split())
    while match := _SUBJECT_PREFIX.match(text):
        text = text[match.end() :]
    return text.casefold()


def _unescape_8bit(text: str, hint: str | None) -> str:
    """Decode header text that may hold raw 8-bit bytes (surrogate-escaped by the parser)."""
    if text.isascii():
        return strip_nul(text)
    return decode_bytes(text.encode("utf-8", "surrogateescape"), hint)


def decode_header(value: str, hint: str | None = None) -> str:
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
            out.append(decode_bytes(bytes(pending), pending_charset))
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
    return strip_nul("".join(out))


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


def addresses(values: Iterable[str] | None, hint: str | None) -> list[Address]:
    """The mailboxes of every value of an address header, in order."""
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
        result.append(Address(name=collapse_whitespace(decode_header(name, hint)), address=address))
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


def parse_message_ids(value: str, require_at: bool) -> list[str]:
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


def parse_date(value: str) -> datetime | None:
    """A Date header's time in UTC, or None when it cannot be read."""
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


# -- MIME parameters (Content-Type, Content-Disposition) ------------------------------------------------

_MAX_PARAMS_HEADER = 16384
_MIME_PARAM = re.compile(r';\s*([^\s=;]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;]*))')
_USED_PARAMS = frozenset({"charset", "name", "filename"})


def mime_params(part: Message, header: str) -> tuple[str | None, dict[str, str]]:
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
    """mime_params of a header value without RFC 2231 parameters (the dict is shared: copy it)."""
    decoded: dict[str, str] = {}
    # The email package's general parameter parser costs more than the rest of a simple message.
    for match in _MIME_PARAM.finditer(value, params_start):
        key = match.group(1).lower()
        if key in _USED_PARAMS and key not in decoded:
            quoted, plain = match.group(2, 3)
            # Only \\ and \" are unescaped, like email.utils.unquote: Windows clients send paths
            # such as "C:\Users\x.pdf" unescaped.
            raw = quoted.replace("\\\\", "\\").replace('\\"', '"') if quoted is not None else plain.strip().strip('"')
            decoded[key] = decode_header(raw)
    return value[:params_start].strip().lower(), decoded


def _param_value(value: str | tuple[str | None, str | None, str]) -> str:
    """Decode a parameter value: RFC 2231 (charset'lang'%XX), encoded words, raw 8-bit bytes."""
    if isinstance(value, tuple):
        charset, _language, text = value
        try:
            data = text.encode("latin-1", "surrogateescape")
        except UnicodeEncodeError:
            return decode_header(text)
        return decode_bytes(data, charset)
    return decode_header(value)


# -- the headers of a message -----------------------------------------------------------------------------


def wanted_headers(msg: Message) -> dict[str, list[str]]:
    """Collect the raw values of the headers we use, in one pass over the header list."""
    values: dict[str, list[str]] = {}
    for name, value in msg.raw_items():
        key = name.lower()
        if key in _WANTED_HEADERS:
            values.setdefault(key, []).append(value.replace("\r", "").replace("\n", "").strip())
    return values


def header_hint(msg: Message, values: dict[str, list[str]]) -> str | None:
    """Return the charset to try for raw 8-bit header bytes: the one the message body declares."""
    if all(value.isascii() for found in values.values() for value in found):
        return None
    return mime_params(msg, "content-type")[1].get("charset")


def first_value(values: dict[str, list[str]], name: str) -> str:
    """The first value of a header that wanted_headers collected, or ''."""
    found = values.get(name)
    return found[0] if found else ""
