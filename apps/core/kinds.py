"""The kinds every layer speaks of: who calls (principal), through which door, with which credential,
granted which scopes, holding which role in a tenant."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import models


class Principal(models.TextChoices):
    PERSON = "person", "Person"
    AGENT = "agent", "Agent"
    INTERNAL = "internal", "Internal"


class Door(models.TextChoices):
    UI = "ui", "Web console"
    CLI = "cli", "Command line"
    MCP = "mcp", "MCP"
    # the REST API called with an agent's bearer credential (a person's session at the same paths is `ui`)
    API = "api", "REST API"
    INTERNAL = "internal", "Internal"


# which doors each principal may come through (SPEC §1)
DOORS_OF = {
    # persons through the internal door: what a person set up to act by itself (a rule, an AI label) acting as them
    Principal.PERSON: frozenset({Door.UI, Door.CLI, Door.INTERNAL}),
    # an agent's bearer credential works on /mcp and on the REST API alike, under the same rules
    Principal.AGENT: frozenset({Door.MCP, Door.API}),
    Principal.INTERNAL: frozenset({Door.INTERNAL}),
}


class CredentialKind(models.TextChoices):
    NONE = "", "None"
    OAUTH = "oauth", "OAuth connection"
    APIKEY = "apikey", "API key"
    # standing authority a person set up (Caller.standing): the rule or AI label acting as them
    RULE = "rule", "Rule"
    AILABEL = "ailabel", "AI label"
    AUTOREPLY = "autoreply", "Automatic reply"


class Scope(models.TextChoices):
    """The permissions an agent's credential carries (SPEC §7)."""

    READ = "read", "Read"
    WRITE = "write", "Organize and draft"
    SEND = "send", "Send"


def recorded_scopes(scopes: Iterable[str]) -> list[str]:
    """The scopes a new credential records: Read always, plus the known ones asked for (a typo widens nothing)."""
    return sorted({Scope.READ.value} | {s for s in scopes if s in Scope.values})


def granted_scopes(scopes: Iterable[str]) -> frozenset[str]:
    """What a credential holding `scopes` may do: its recorded scopes, and Send implies Organize and draft."""
    granted = set(recorded_scopes(scopes))
    if Scope.SEND.value in granted:
        granted.add(Scope.WRITE.value)
    return frozenset(granted)


class Role(models.TextChoices):
    MEMBER = "MEMBER", "Member"
    ADMIN = "ADMIN", "Admin"
    OWNER = "OWNER", "Owner"

    @property
    def rank(self) -> int:
        return _RANK[self.value]

    def covers(self, required: Role | str) -> bool:
        """This role is at least `required`."""
        return self.rank >= Role(required).rank


_RANK = {Role.MEMBER.value: 1, Role.ADMIN.value: 2, Role.OWNER.value: 3}
