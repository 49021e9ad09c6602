"""What an operation takes, as JSON Schema: its input model's own constraints and the gate's bounds, from one source.

The input model declares what holds for every call (types, lengths, patterns, enums); a `Bound` of the operation
declares a count read from settings.OPERATIONS, enforced by the gate (apps.gate.dispatch._limits) and never by
the model. Every door that publishes an operation's input (the OpenAPI document, the MCP tool list, `oaken ops
list --json`) takes it from here, so a client learns every bound the gate holds it to before it calls: an array's
`maxItems`, a number's `maximum`, a text's `maxLength`, each the smaller of the model's and the setting's; and
the bound every door holds every input to before it is parsed (apps.gate.payload): no array or object holds more
than INPUT_ARRAY_MAX items, so an array or a free-form object that declares no tighter bound says that one.
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import DEFAULT_REF_TEMPLATE

from apps.core.bounds import bounds
from apps.operations.registry import Operation

_KEYWORD = {"array": "maxItems", "integer": "maximum", "number": "maximum", "string": "maxLength"}


def bounded(schema: dict[str, Any], maximum: int) -> dict[str, Any]:
    """`schema` (a field's, or each branch of its anyOf) held to `maximum` items, characters or value."""
    branches = schema.get("anyOf") or schema.get("oneOf")
    if branches is not None:
        key = "anyOf" if "anyOf" in schema else "oneOf"
        return {**schema, key: [bounded(branch, maximum) for branch in branches]}
    keyword = _KEYWORD.get(schema.get("type", ""))
    if keyword is None:
        return schema
    current = schema.get(keyword)
    return {**schema, keyword: maximum if current is None else min(current, maximum)}


def input_json_schema(op: Operation, *, ref_template: str = DEFAULT_REF_TEMPLATE) -> dict[str, Any]:
    """The JSON Schema of `op`'s input as the gate checks it (validation mode), its bounds applied."""
    schema = op.input_model.model_json_schema(mode="validation", ref_template=ref_template)
    properties: dict[str, Any] = schema.get("properties", {})
    for bound in op.bounds:
        if bound.field in properties:
            properties[bound.field] = bounded(properties[bound.field], int(bounds[bound.setting]))
    _hold_containers(schema, int(bounds.INPUT_ARRAY_MAX))
    return schema


def _hold_containers(schema: Any, most: int) -> None:
    """Give every array, and every object taking properties it does not name, the per-container item bound, where
    the schema declares none tighter (in place)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        if node.get("type") == "array":
            node["maxItems"] = min(node.get("maxItems", most), most)
        elif node.get("type") == "object" and node.get("additionalProperties") not in (None, False):
            node["maxProperties"] = min(node.get("maxProperties", most), most)
        stack.extend(value for key, value in node.items() if key not in ("default", "examples", "const", "enum"))
