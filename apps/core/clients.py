"""Where a request came from, as throttles count it."""

from __future__ import annotations

import ipaddress

from django.http import HttpRequest


def client_address(request: HttpRequest) -> str:
    """The client's address: IPv6 by its /64 (one host usually holds a whole /64)."""
    address = str(request.META.get("REMOTE_ADDR", ""))
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if parsed.version == 6:
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return address
