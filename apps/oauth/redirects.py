"""What a client may register (by RFC 7591 registration or in its client ID metadata document): the same bounds
and the same redirect-URI policy either way."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from django.conf import settings

MAX_REDIRECT_URIS = 10
MAX_REDIRECT_URI_LENGTH = 2000
MAX_CLIENT_NAME_LENGTH = 200
_BLOCKED_SCHEMES = {"javascript", "data", "file", "vbscript", "about", "blob"}


def redirect_uri_problem(uri: str) -> str | None:
    """Why a redirect URI cannot be registered (https, loopback http, or a native app's own scheme), or None."""
    if len(uri) > MAX_REDIRECT_URI_LENGTH or any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in uri):
        return "redirect URIs are at most 2000 characters, without spaces or control characters"
    parts = urlsplit(uri)
    if parts.fragment or "#" in uri:
        return "redirect URIs may not carry a fragment"
    if parts.scheme == "https" and parts.netloc:
        return None
    if parts.scheme == "http":
        host = (parts.hostname or "").strip("[]")
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        return None if loopback else "http redirect URIs must be loopback (127.0.0.1, [::1] or localhost)"
    if parts.scheme in settings.OAUTH_NATIVE_REDIRECT_SCHEMES and parts.scheme not in _BLOCKED_SCHEMES:
        return None
    return "redirect URIs must be https, loopback http, or a known native-app scheme"
