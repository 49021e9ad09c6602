"""Which part of a refused input's location an error may name: only what the input's JSON Schema itself names.

A location (pydantic's `loc`, a JSON Schema validator's path) is made of the caller's own keys wherever the input
is one the schema does not describe: an unknown argument, a key of a free-form map. Repeating those would echo the
submitted text in an error, so an error names the longest start of its location that the schema knows, and says
"an unknown argument" for the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

UNKNOWN_ARGUMENT = "an unknown argument"

_COMBINATIONS = ("anyOf", "oneOf", "allOf")


def _expanded(nodes: list[Any], defs: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Each schema node with its `$ref` resolved and every option of a combination beside it."""
    found: list[Mapping[str, Any]] = []
    pending, seen = list(nodes), set()
    while pending:
        node = pending.pop()
        if not isinstance(node, Mapping) or id(node) in seen:
            continue
        seen.add(id(node))
        found.append(node)
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            pending.append(defs.get(ref.rsplit("/", 1)[-1]))
        for key in _COMBINATIONS:
            options = node.get(key)
            if isinstance(options, list):
                pending.extend(options)
    return found


def _index(part: str | int) -> int | None:
    if isinstance(part, bool):
        return None
    if isinstance(part, int):
        return part
    return int(part) if part.isascii() and part.isdigit() else None


def known_path(schema: Mapping[str, Any], loc: Sequence[str | int]) -> tuple[str | int, ...]:
    """The longest start of `loc` whose every part is a property the schema declares or an index into an array it
    declares (never a key of a map, an unknown property, or a validator's own label)."""
    defs = schema.get("$defs", {})
    nodes: list[Any] = [schema]
    kept: list[str | int] = []
    for part in loc:
        following: list[Any] = []
        index = _index(part)
        for node in _expanded(nodes, defs):
            properties = node.get("properties")
            if isinstance(part, str) and isinstance(properties, Mapping) and part in properties:
                following.append(properties[part])
            if index is not None:
                prefix, items = node.get("prefixItems"), node.get("items")
                if isinstance(prefix, list) and index < len(prefix):
                    following.append(prefix[index])
                elif isinstance(items, Mapping):
                    following.append(items)
        if not following:
            break
        kept.append(part)
        nodes = following
    return tuple(kept)


def dotted(path: Sequence[str | int]) -> str:
    return ".".join(str(part) for part in path)
