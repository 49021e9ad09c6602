"""A plugin's schemas and words, as Oaken takes them (SPEC §17, docs/plugins.md).

A plugin's process says what it offers: names, JSON schemas for its inputs, outputs and settings, and words of
its author's (summaries, titles, descriptions). None of it is trusted. The words are made plain and short before
an agent or a person reads them; a schema keeps only the keywords of JSON Schema that Oaken knows, its local
references resolved (a recursive one, or one that resolves to too many parts, is refused), and its patterns are
matched by an engine that runs in linear time. Inputs and outputs are checked by models built from these schemas
(the plugin's own classes stay in its process); an output's strings are marked as mail-derived text.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any, ClassVar, cast

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, best_match
from jsonschema.exceptions import ValidationError as JsonSchemaError
from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError, model_validator
from pydantic_core import PydanticCustomError, SchemaValidator, core_schema
from pydantic_core import SchemaError as PydanticSchemaError

from apps.operations.registry import DefinitionError

# a field of a plugin's schemas is named by an identifier
PROPERTY_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
SUMMARY_MAX_CHARS = 200
WORDS_MAX_CHARS = 300
# keywords whose value maps names (a field's, a definition's) to schemas
_NAMED_SCHEMAS = ("properties", "$defs", "definitions")
# what a plugin's schema may say (pydantic's models say no more); anything else is left out of it
_KEYWORDS = frozenset(
    {
        *("type", "properties", "required", "additionalProperties", "items", "prefixItems", "anyOf", "oneOf"),
        *("allOf", "enum", "const", "default", "title", "description", "format", "pattern", "minLength"),
        *("maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems"),
        *("maxItems", "uniqueItems", "minProperties", "maxProperties", "$ref", "$defs", "definitions"),
        *("writeOnly", "readOnly", "deprecated", "contentMediaType", "contentEncoding"),
    }
)
# a plugin's schema, its references resolved, holds at most this many nodes (a few kB of references can resolve to
# millions: every Oaken process checks them at start)
SCHEMA_NODES_MAX = 5000
PATTERN_MAX_CHARS = 300


# ---------------------------------------------------------------- the words a plugin wrote


def plain(text: object, most: int) -> str:
    """Text a plugin wrote, as an agent or a person may read it: printable characters on one line, short."""
    words = " ".join("".join(c if c.isprintable() else " " for c in str(text)).split())
    return words if len(words) <= most else words[: most - 1] + "…"


def reduced(schema: Any) -> Any:
    """A plugin's JSON schema as an agent and a person may read it: only the keywords of JSON Schema that Oaken
    knows (a keyword of the plugin's own is left out, and so are examples and comments), and every string in it,
    a title, a description, a default, an enum value, made plain and short; a pattern is kept as it is (checked by
    schema_model). An enum value cut so can no longer be matched: that operation then fails, plainly."""
    if isinstance(schema, dict):
        kept: dict[str, Any] = {}
        for key, value in schema.items():
            if key in _NAMED_SCHEMAS and isinstance(value, dict):
                kept[key] = {name: reduced(sub) for name, sub in value.items()}  # names, not keywords
            elif key == "pattern" and isinstance(value, str):
                kept[key] = value
            elif key in _KEYWORDS:
                kept[key] = reduced(value)
        return kept
    if isinstance(schema, list):
        return [reduced(item) for item in schema]
    if isinstance(schema, str):
        return plain(schema, WORDS_MAX_CHARS)
    return schema


def property_names(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                yield from (str(name) for name in value)
            yield from property_names(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from property_names(item)


# ---------------------------------------------------------------- models from a plugin's schemas


def untrusted(schema: Any) -> Any:
    """The schema with every string marked as mail-derived text (fenced as data at the MCP door): a plugin's
    output is built from mail, whatever its author declared."""
    if isinstance(schema, dict):
        marked = {key: untrusted(value) for key, value in schema.items()}
        if marked.get("type") == "string" or (isinstance(marked.get("type"), list) and "string" in marked["type"]):
            marked["x-untrusted"] = True
        return marked
    if isinstance(schema, list):
        return [untrusted(item) for item in schema]
    return schema


_PHRASES = {
    "type": "has the wrong type",
    "enum": "is not one of the allowed values",
    "const": "is not the allowed value",
    "minLength": "is too short",
    "maxLength": "is too long",
    "pattern": "does not have the expected form",
    "format": "does not have the expected form",
    "minimum": "is too small",
    "exclusiveMinimum": "is too small",
    "maximum": "is too large",
    "exclusiveMaximum": "is too large",
    "minItems": "has too few items",
    "maxItems": "has too many items",
    "uniqueItems": "has repeated items",
}


def first_error(validator: Draft202012Validator, value: Any) -> dict[str, Any] | None:
    """The most relevant error, as pydantic's line error: where, and a fixed phrase (never the value)."""
    error = best_match(validator.iter_errors(value))
    if error is None:
        return None
    loc = tuple(error.absolute_path)
    if error.validator == "required":
        missing = next((name for name in error.validator_value if name not in error.instance), None)
        return {"type": "missing", "loc": (*loc, missing) if missing else loc, "input": None}
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = next((name for name in error.instance if name not in allowed), None)
        return {"type": "extra_forbidden", "loc": (*loc, extra) if extra else loc, "input": None}
    phrase = _PHRASES.get(str(error.validator), "is not valid")
    return {"type": PydanticCustomError("plugin_schema", phrase), "loc": loc, "input": None}


class SchemaModel(BaseModel):
    """A model checked against a plugin's JSON schema (the plugin's own classes stay in its process). It
    declares no field and forbids any: the value, once the schema passed it, is kept whole and is what it
    dumps."""

    model_config = ConfigDict(extra="forbid")
    schema_of: ClassVar[dict[str, Any]] = {}
    validator_of: ClassVar[Draft202012Validator | None] = None
    _value: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _check(cls, value: Any, handler: Any) -> Any:
        if isinstance(value, cls):
            return value
        assert cls.validator_of is not None
        error = first_error(cls.validator_of, value)
        if error is not None:
            raise ValidationError.from_exception_data(cls.__name__, [error])  # type: ignore[list-item]
        made = handler({})
        made._value = copy.deepcopy(value)
        return made

    def model_dump(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return copy.deepcopy(self._value)

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return copy.deepcopy(cls.schema_of)

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        # what every schema of this model says (the OpenAPI document's among them): the plugin's
        return copy.deepcopy(cls.schema_of)


def inlined(schema: dict[str, Any], depth: int = 0) -> Any:
    """The schema with its local references ("#/$defs/...") replaced by what they name: a model of its own,
    wherever it is placed (an OpenAPI component, an MCP tool). A recursive schema is refused."""
    defs = schema.get("$defs", {})
    nodes = 0

    def walk(node: Any, depth: int) -> Any:
        nonlocal nodes
        nodes += 1
        if nodes > SCHEMA_NODES_MAX:
            raise DefinitionError(f"a plugin's schema holds more than {SCHEMA_NODES_MAX} parts once resolved")
        if depth > 32:
            raise DefinitionError("a plugin's schema is recursive or too deep")
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                name = ref.removeprefix("#/$defs/")
                if name not in defs:
                    raise DefinitionError("a plugin's schema refers to what it does not define")
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return {**walk(defs[name], depth + 1), **walk(rest, depth + 1)}
            return {k: walk(v, depth + 1) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [walk(item, depth + 1) for item in node]
        return node

    result: dict[str, Any] = walk(schema, depth)
    return result


@lru_cache(maxsize=1024)
def _pattern(pattern: str) -> SchemaValidator:
    """A pattern compiled for a regular-expression engine that runs in linear time (pydantic-core's, Rust's):
    Python's `re` takes time exponential in the text for patterns such as ^(a+)+$, in Oaken's own process."""
    return SchemaValidator(core_schema.str_schema(pattern=pattern), core_schema.CoreConfig(regex_engine="rust-regex"))


def _matches(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[JsonSchemaError]:
    if isinstance(instance, str) and not _pattern(pattern).isinstance_python(instance):
        yield JsonSchemaError("does not match its pattern")


# the validator of every schema a plugin gave (its inputs, outputs and settings): JSON Schema 2020-12, a pattern
# matched in linear time
PluginValidator = validators.extend(Draft202012Validator, {"pattern": _matches})


def validator(schema: dict[str, Any]) -> Draft202012Validator:
    """A checked validator of a plugin's schema; DefinitionError when its patterns are too long or need what a
    linear-time engine lacks (back-references, look-around)."""
    try:
        PluginValidator.check_schema(schema)
    except SchemaError:
        raise DefinitionError("its schema is not a JSON schema") from None
    for pattern in _patterns(schema):
        if len(pattern) > PATTERN_MAX_CHARS:
            raise DefinitionError(f"a pattern of its schema is longer than {PATTERN_MAX_CHARS} characters")
        try:
            _pattern(pattern)
        except PydanticSchemaError:
            raise DefinitionError("a pattern of its schema needs back-references or look-around") from None
    return cast(Draft202012Validator, PluginValidator(schema))


def _patterns(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            elif key in _NAMED_SCHEMAS and isinstance(value, dict):
                for sub in value.values():
                    yield from _patterns(sub)
            else:
                yield from _patterns(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _patterns(item)


def schema_model(name: str, schema: dict[str, Any]) -> type[SchemaModel]:
    checked = validator(schema)
    model = cast(type[SchemaModel], type(name, (SchemaModel,), {"__module__": __name__}))
    model.schema_of = schema
    model.validator_of = checked
    return model


def closed(schema: dict[str, Any]) -> bool:
    """An object that forbids fields it does not declare, and so does every object it defines."""
    objects = [schema, *schema.get("$defs", {}).values()]
    return all(o.get("type") != "object" or o.get("additionalProperties") is False for o in objects)
