"""Resource indicators a client sends (RFC 8707), mapped onto one of the two resources Oaken has: its /mcp
endpoint and its REST API (/api/v1).

A token is bound to exactly one of them and accepted only there (apps.agents.bearer): a token an MCP client holds
cannot be replayed on the REST API, nor the other way round, though either grants the same rights (the same
connection, scopes and workspaces) through the same gate. One resource per token keeps each audience checkable
with one comparison, and a client that wants both asks for each."""

from __future__ import annotations

from apps.core.links import API_PATH, MCP_PATH

# why a requested resource is refused, in the words the client gets (never repeating what it sent)
INVALID_TARGET = "this server's resources are its /mcp endpoint and its REST API (/api/v1), one per token"


def canonical_resources(values: list[str], origin: str) -> list[str] | None:
    """The requested resource indicators mapped onto ours (a list of one), or None when any names another
    resource or they name both of ours.

    Clients differ in what they send for the MCP endpoint: the /mcp URL with or without a trailing slash, or the
    bare origin (from the root metadata document); all mean /mcp. The REST API is /api/v1, with or without the
    slash. Nothing requested binds the token to /mcp, as before the REST API took tokens, so no token is ever
    unbound.
    """
    mcp = {origin, origin + "/", origin + MCP_PATH, origin + MCP_PATH + "/"}
    api = {origin + API_PATH, origin + API_PATH + "/"}
    named = {origin + MCP_PATH if value in mcp else origin + API_PATH if value in api else None for value in values}
    if None in named or len(named) > 1:
        return None
    return [str(named.pop())] if named else [origin + MCP_PATH]
