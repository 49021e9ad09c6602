"""Decoding mail bytes to text whatever charset they claim: mislabelled, unknown or none at all.

Decoding never raises: a declared charset that does not fit gives way to UTF-8, then cp1252, then latin-1.
"""

import codecs
import re
from functools import lru_cache

_META_CHARSET = re.compile(rb"<meta[^>]{0,200}?charset\s*=\s*[\"']?\s*([A-Za-z0-9_.:-]+)", re.IGNORECASE)
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


def decode_bytes(data: bytes, charset: str | None) -> str:
    """Decode text: the declared charset if it fits, else UTF-8, else cp1252, else latin-1; never raises."""
    codec = _codec(charset)
    if codec is not None and codec.startswith(_NOT_ASCII_COMPATIBLE):
        try:
            return strip_nul(data.decode(codec))
        except ValueError:
            if data.isascii():
                return strip_nul(data.decode(codec, "replace"))
    elif data.isascii():
        return strip_nul(data.decode("ascii"))
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
            return strip_nul(data.decode(candidate))
        except ValueError:  # UnicodeDecodeError, or UnicodeError from codecs such as utf-7
            continue
    return strip_nul(data.decode("latin-1"))


def decode_html(data: bytes, charset: str | None) -> str:
    """decode_bytes for HTML, where a missing charset may be declared in a <meta> tag instead."""
    if charset is None and not data.isascii() and (match := _META_CHARSET.search(data, 0, 4096)):
        charset = match.group(1).decode("ascii")
    return decode_bytes(data, charset)


def strip_nul(text: str) -> str:
    """The text without NUL characters."""
    # NUL cannot be stored in PostgreSQL text columns and never carries meaning in mail text.
    return text.replace("\x00", "") if "\x00" in text else text
