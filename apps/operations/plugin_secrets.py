"""Where a plugin's settings hold secrets, wherever its settings schema puts them (docs/plugins.md).

A secret is a value at a place the schema marks `format: password` (what pydantic writes for a `SecretStr`) or
`writeOnly`: at the top, in a nested model (a `$ref` into `$defs`, or an inlined object), an item of a list, a
value of a dict, one branch of an `anyOf` (an optional secret). A place is a secret when *any* schema that may
apply there says so: an `anyOf` whose branches disagree is masked (hiding too much is the safe mistake). A value
at a place the schema no longer allows (left from an older version of the plugin) is masked too.

Shown, a secret that is set reads as the mask. Sent back, the mask keeps what is stored at the same place: the
same keys and the same list positions (`servers.1.password` keeps the stored `servers[1].password`). A list item
that moved (a row above it was removed) names where it was: the mask, "@" and a JSON pointer into the stored
settings (`********@/servers/2/password`), which must point at a stored secret. A mask that finds no stored
secret is refused (it is never stored as if it were the secret).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

# the JSON Schema "format" pydantic gives a SecretStr: such settings are never shown back
SECRET_FORMAT = "password"  # noqa: S105 - a JSON Schema format, not a password
MASK = "********"
# where a schema may put the schemas that apply to the same value
_SPREAD = ("anyOf", "oneOf", "allOf")
_CONDITIONAL = ("if", "then", "else")


class _Missing:
    """No value at this place (not even null)."""


_MISSING: Any = _Missing()
# a schema no value may meet, for a place whose $ref cannot be followed: treated as a secret
_UNKNOWN = {"format": SECRET_FORMAT}


class SecretNotKept(Exception):
    """A mask was sent where no stored secret can be kept; `where` is the place it was sent to."""

    def __init__(self, where: tuple[str | int, ...]) -> None:
        super().__init__(".".join(str(part) for part in where))
        self.where = where


def _says_secret(schema: dict[str, Any]) -> bool:
    return schema.get("format") == SECRET_FORMAT or schema.get("writeOnly") is True


def _unset(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


@dataclass(frozen=True)
class _Place:
    """The schemas that apply at one place of the settings, and whether the schema forbids anything there."""

    schemas: tuple[dict[str, Any], ...]
    forbidden: bool = False

    @property
    def secret(self) -> bool:
        return self.forbidden or any(_says_secret(schema) for schema in self.schemas)


class SettingsSchema:
    """A plugin's settings schema, walked alongside a value of it."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.root = schema

    def _resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            return None  # a plugin's schema refers to nothing outside itself
        node: Any = self.root
        for token in _pointer(ref[1:]) or ():
            if isinstance(node, dict) and token in node:
                node = node[token]
            else:
                return None
        return node

    def place(self, *nodes: Any, forbidden: bool = False) -> _Place:
        """Every schema that applies where these do: references followed, anyOf/oneOf/allOf and if/then/else
        spread (each once: a recursive schema ends)."""
        found: list[dict[str, Any]] = []
        seen: set[int] = set()
        stack = list(nodes)
        while stack:
            node = stack.pop()
            if not isinstance(node, dict) or id(node) in seen:
                continue
            seen.add(id(node))
            found.append(node)
            ref = node.get("$ref")
            if isinstance(ref, str):
                target = self._resolve(ref)
                stack.append(target if isinstance(target, dict) else _UNKNOWN)
            for key in _SPREAD:
                if isinstance(node.get(key), list):
                    stack.extend(node[key])
            stack.extend(node.get(key) for key in _CONDITIONAL)
        return _Place(tuple(found), forbidden)

    @property
    def top(self) -> _Place:
        return self.place(self.root)

    def at_key(self, here: _Place, key: str) -> _Place:
        found: list[Any] = []
        forbidden = False
        for schema in here.schemas:
            properties = schema.get("properties")
            if isinstance(properties, dict) and key in properties:
                found.append(properties[key])
                continue
            patterns = schema.get("patternProperties")
            matched = [sub for pattern, sub in (patterns or {}).items() if _matches(pattern, key)]
            if matched:
                found.extend(matched)
                continue
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                found.append(extra)
            elif extra is False:
                forbidden = True
        return self.place(*found, forbidden=forbidden and not found)

    def at_index(self, here: _Place, index: int) -> _Place:
        found: list[Any] = []
        forbidden = False
        for schema in here.schemas:
            prefix = schema.get("prefixItems")
            items = schema.get("items")
            if isinstance(prefix, list) and index < len(prefix):
                found.append(prefix[index])
            elif isinstance(items, dict):
                found.append(items)
            elif isinstance(items, list):  # the older tuple form
                found.append(items[index] if index < len(items) else schema.get("additionalItems"))
            elif items is False:
                forbidden = True
        return self.place(*found, forbidden=forbidden and not found)

    # ------------------------------------------------------------ shown, sent back, compared

    def masked(self, value: Any, here: _Place | None = None) -> Any:
        """The value as an admin may see it: every secret that is set reads as the mask."""
        here = self.top if here is None else here
        if here.secret:
            return value if _unset(value) else MASK
        if isinstance(value, dict):
            return {key: self.masked(item, self.at_key(here, str(key))) for key, item in value.items()}
        if isinstance(value, list):
            return [self.masked(item, self.at_index(here, index)) for index, item in enumerate(value)]
        return value

    def kept(self, sent: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
        """The settings sent, each secret sent as the mask replaced by the stored one it names (SecretNotKept
        when there is none)."""
        result: dict[str, Any] = self._kept(sent, stored, stored, self.top, ())
        return result

    def _kept(self, sent: Any, stored: Any, everything: Any, here: _Place, where: tuple[str | int, ...]) -> Any:
        if isinstance(sent, str) and here.secret and not here.forbidden:
            if sent == MASK:
                if stored is _MISSING or _unset(stored):
                    raise SecretNotKept(where)
                return copy.deepcopy(stored)
            if sent.startswith(MASK + "@"):
                return self._stored_secret(everything, sent[len(MASK) + 1 :], where)
            return sent
        if isinstance(sent, dict):
            return {
                key: self._kept(
                    item,
                    stored.get(key, _MISSING) if isinstance(stored, dict) else _MISSING,
                    everything,
                    self.at_key(here, str(key)),
                    (*where, key),
                )
                for key, item in sent.items()
            }
        if isinstance(sent, list):
            return [
                self._kept(
                    item,
                    stored[index] if isinstance(stored, list) and index < len(stored) else _MISSING,
                    everything,
                    self.at_index(here, index),
                    (*where, index),
                )
                for index, item in enumerate(sent)
            ]
        return sent

    def _stored_secret(self, stored: Any, pointer: str, where: tuple[str | int, ...]) -> Any:
        tokens = _pointer(pointer)
        if tokens is None:
            raise SecretNotKept(where)
        here, value = self.top, stored
        for token in tokens:
            if isinstance(value, dict) and token in value:
                here, value = self.at_key(here, token), value[token]
            elif isinstance(value, list) and token.isdigit() and int(token) < len(value):
                here, value = self.at_index(here, int(token)), value[int(token)]
            else:
                raise SecretNotKept(where)
        if not here.secret or here.forbidden or _unset(value):
            raise SecretNotKept(where)
        return copy.deepcopy(value)

    def changed(self, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
        """The names of the settings that differ (`server.password` inside a model, set or not before; a list or
        a dict of free keys is named whole): what an audit event and a preview say, never a value."""
        return sorted(self._changed(before, after, self.top, ""))

    def _changed(self, before: Any, after: Any, here: _Place, prefix: str) -> list[str]:
        names = []
        for key in sorted(set(before) | set(after), key=str):
            old, new = before.get(key, _MISSING), after.get(key, _MISSING)
            if old == new:
                continue
            name = f"{prefix}{key}"
            inner = self.at_key(here, str(key))
            modelled = any(isinstance(s.get("properties"), dict) for s in inner.schemas)
            if modelled and not inner.secret and isinstance(old, dict | _Missing) and isinstance(new, dict | _Missing):
                names.extend(self._changed(_entries(old), _entries(new), inner, f"{name}."))
            else:
                names.append(name)
        return names


def _entries(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _pointer(text: str) -> list[str] | None:
    """The tokens of a JSON pointer (RFC 6901), or None when it is not one."""
    if text == "":
        return []
    if not text.startswith("/"):
        return None
    return [token.replace("~1", "/").replace("~0", "~") for token in text[1:].split("/")]


def _matches(pattern: str, key: str) -> bool:
    try:
        return re.search(pattern, key) is not None
    except re.error:
        return False
