"""Resource indicators a client sends, mapped onto the one resource Oaken has (its /mcp endpoint)."""

from __future__ import annotations

from apps.core.links import MCP_PATH


def canonical_resources(values: list[str], origin: str) -> list[str] | None:
    """The requested resource indicators mapped onto ours, or None when any names another resource.

    Clients differ in what they send for the one resource this server has: the /mcp URL with or without a
    trailing slash, or the bare origin (from the root metadata document); all mean /mcp. Nothing requested
    binds the token to /mcp all the same, so no token is ever unbound.
    """
    ours = {origin, origin + "/", origin + MCP_PATH, origin + MCP_PATH + "/"}
    if any(value not in ours for value in values):
        return None
    return [origin + MCP_PATH]
