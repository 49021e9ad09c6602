"""Unsubscribing from a list (SPEC §10, §21; RFC 2369 List-Unsubscribe, RFC 8058 one-click).

What a message's `List-Unsubscribe` header offers is read from the message's own bytes as received (the stored
raw source, the same bytes its DKIM signature covers), and decides how Oaken may act on it:

- one-click: only when the message carries `List-Unsubscribe-Post: List-Unsubscribe=One-Click`, an https URI in
  `List-Unsubscribe`, each of the two headers exactly once, and a DKIM signature that verifies and whose `h=`
  covers both. Then a request whose execution is one POST of exactly `List-Unsubscribe=One-Click` to that URI
  (apps.outbound.oneclick, run by the delivery worker after approval, at most once);
- mailto: an ordinary outbound e-mail request to that one address, with the URI's subject and body (defaults
  when absent); its other fields (cc, bcc, to, headers) are never used: mail text adds no recipients;
- an https link without one-click (or without a valid signature): never fetched. The answer hands the link
  back as the sender's, for the person to open themselves if they trust it.

The URL is treated like a secret (its query string usually carries the list's token): it is kept on the request
to be executed, never logged or audited, and shown only as host and path (`shown_target`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from email.parser import BytesHeaderParser
from email.policy import compat32
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import dkim
from django.conf import settings
from django.utils.module_loading import import_string

log = logging.getLogger("oaken.outbound")

ONE_CLICK_BODY = b"List-Unsubscribe=One-Click"
ONE_CLICK_CONTENT_TYPE = "application/x-www-form-urlencoded"
DEFAULT_SUBJECT = "unsubscribe"
DEFAULT_BODY = "unsubscribe\n"
URL_MAX_CHARS = 2000
# a list's own subject and body in a mailto URI: at most this many characters each (longer: the defaults)
MAILTO_TEXT_MAX_CHARS = 1000
# signatures looked at on one message, at most (each may cost a DNS lookup)
SIGNATURES_MAX = 5

_BRACKETED = re.compile(r"<([^<>]*)>")
_COVERED = {b"list-unsubscribe", b"list-unsubscribe-post"}


@dataclass(frozen=True)
class Offer:
    """What the header offers, as written (no DKIM verdict yet)."""

    https: str  # the first https URI ('' when none)
    mailto: str  # the first mailto URI ('' when none)
    one_click_asked: bool  # List-Unsubscribe-Post says List-Unsubscribe=One-Click, each header once


@dataclass(frozen=True)
class Plan:
    """How this message can be unsubscribed from: one_click, mailto, link (the person opens it) or none."""

    method: str
    url: str = ""
    # the domain whose valid DKIM signature covers both headers ('' when none does, or none was needed)
    signed_by: str = ""
    # mailto: the one address, the subject and the body
    address: str = ""
    subject: str = ""
    body: str = ""


def _unfold(value: str) -> str:
    return re.sub(r"\r?\n[ \t]*", " ", value).strip()


def offer_of(raw: bytes) -> Offer:
    headers = BytesHeaderParser(policy=compat32).parsebytes(raw, headersonly=True)
    found = [_unfold(str(v)) for v in headers.get_all("List-Unsubscribe") or []]
    posts = [_unfold(str(v)) for v in headers.get_all("List-Unsubscribe-Post") or []]
    uris = [u.strip() for value in found for u in _BRACKETED.findall(value)]
    https = next((u for u in uris if usable_https(u)), "")
    mailto = next((u for u in uris if u[:7].lower() == "mailto:"), "")
    asked = len(found) == 1 and len(posts) == 1 and posts[0].replace(" ", "") == "List-Unsubscribe=One-Click"
    return Offer(https=https, mailto=mailto, one_click_asked=asked)


def usable_https(url: str) -> bool:
    """An https URL Oaken would POST to: a host, no user or password in it, nothing but printable ASCII."""
    if not url or len(url) > URL_MAX_CHARS or not url.isascii() or any(c <= " " or c == "\x7f" for c in url):
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        return False
    return parts.scheme.lower() == "https" and bool(parts.hostname) and "@" not in parts.netloc


def shown_target(url: str) -> str:
    """Where a request goes, as a person or an agent may see it: host and path, the query string (the list's
    token, often) left out."""
    if not url:
        return ""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port not in (None, 443) else ""
    return f"https://{host}{port}{parts.path or '/'}{'?…' if parts.query else ''}"


def host_of(url: str) -> str:
    return (urlsplit(url).hostname or "") if url else ""


def _dnsfunc() -> Callable[..., Any]:
    named = getattr(settings, "DKIM_DNS_FUNC", "")
    return import_string(named) if named else dkim.dnsplug.get_txt


def signed_by(raw: bytes, *, timeout: int) -> str:
    """The domain of a DKIM signature on `raw` that verifies and whose h= covers List-Unsubscribe and
    List-Unsubscribe-Post; '' when there is none (unsigned, a wrong key, a changed header, h= too narrow, or
    the key cannot be looked up)."""
    try:
        checker = dkim.DKIM(raw, minkey=1024, timeout=timeout)
    except Exception:  # a message dkimpy cannot read: no signature it can vouch for
        return ""
    signatures = sum(1 for name, _ in checker.headers if name.lower() == b"dkim-signature")
    dnsfunc = _dnsfunc()
    for idx in range(min(signatures, SIGNATURES_MAX)):
        try:
            verified = checker.verify(idx=idx, dnsfunc=dnsfunc)
        except Exception as exc:  # a malformed signature or key, or DNS away: this signature vouches for nothing
            log.info("a DKIM signature could not be verified: %s", type(exc).__name__)
            continue
        if verified and set(checker.include_headers) >= _COVERED:
            return bytes(checker.domain).decode("ascii", "replace")
    return ""


def mailto_parts(url: str) -> tuple[str, str, str] | None:
    """(address, subject, body) of a mailto URI naming exactly one address; None otherwise. Only subject and body
    are read: a cc, bcc or to field in the URI is never used."""
    rest = url[7:]
    to_part, _, query = rest.partition("?")
    addresses = [a.strip() for a in unquote(to_part).split(",") if a.strip()]
    if len(addresses) != 1:
        return None
    fields = {k.lower(): v for k, v in reversed(parse_qsl(query, keep_blank_values=True))}
    subject = " ".join(fields.get("subject", "").split())
    body = fields.get("body", "").replace("\r\n", "\n")
    if not subject or len(subject) > MAILTO_TEXT_MAX_CHARS:
        subject = DEFAULT_SUBJECT
    if not body.strip() or len(body) > MAILTO_TEXT_MAX_CHARS:
        body = DEFAULT_BODY
    return addresses[0], subject, body


def plan_for(raw: bytes, *, timeout: int) -> Plan:
    """How Oaken may unsubscribe from the message whose bytes are `raw` (see the module's doc)."""
    offer = offer_of(raw)
    if offer.https and offer.one_click_asked:
        domain = signed_by(raw, timeout=timeout)
        if domain:
            return Plan("one_click", url=offer.https, signed_by=domain)
    if offer.mailto:
        parts = mailto_parts(offer.mailto)
        if parts is not None:
            address, subject, body = parts
            return Plan("mailto", address=address, subject=subject, body=body)
    if offer.https:
        return Plan("link", url=offer.https)
    return Plan("none")
