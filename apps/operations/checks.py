"""System checks of the operations against the settings: a typo in a bound's name, a default outside its range
or an unknown role fails `manage.py check` (and so CI and start-up), not the first call that meets it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error

from apps.core.bounds import Bounds
from apps.operations.registry import Operation, registry
from apps.workspaces.models import Role

_SETTINGS_HINT = "Name a key of OPERATIONS in config/settings/operations.py, or add it there."


def check_operations(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every registered operation's bounds, threshold and role, and the OPERATIONS bounds themselves."""
    bounds: Mapping[str, Any] = settings.OPERATIONS
    found: list[CheckMessage] = []
    for op in registry:
        found.extend(_operation_errors(op, bounds))
    found.extend(_range_errors(bounds, getattr(settings, "OPERATIONS_RANGES", {})))
    found.extend(_order_errors(bounds, getattr(settings, "OPERATIONS_ORDERED", ())))
    found.extend(_declared_errors(bounds))
    return found


def _declared_errors(bounds: Mapping[str, Any]) -> Iterator[CheckMessage]:
    """The typed bounds object (apps.core.bounds) names exactly the OPERATIONS block's bounds."""
    declared = Bounds.names()
    for name in sorted(set(bounds) - declared):
        yield Error(
            f"OPERATIONS[{name!r}] is not declared in apps.core.bounds.Bounds",
            hint="Add it there, so code reads it as bounds.<NAME>.",
            obj=name,
            id="oaken.E008",
        )
    for name in sorted(declared - set(bounds)):
        yield Error(
            f"apps.core.bounds.Bounds declares {name!r}, which is not a key of OPERATIONS",
            hint=_SETTINGS_HINT,
            obj=name,
            id="oaken.E008",
        )


def _operation_errors(op: Operation, bounds: Mapping[str, Any]) -> Iterator[CheckMessage]:
    for bound in op.bounds:
        if bound.setting not in bounds:
            yield Error(
                f"operation {op.name!r}: the bound on {bound.field!r} names {bound.setting!r}, "
                "which is not a key of settings.OPERATIONS",
                hint=_SETTINGS_HINT,
                obj=op.name,
                id="oaken.E001",
            )
    rule = op.confirm
    if rule.kind == "above" and rule.threshold_setting not in bounds:
        yield Error(
            f"operation {op.name!r}: its confirmation threshold names {rule.threshold_setting!r}, "
            "which is not a key of settings.OPERATIONS",
            hint=_SETTINGS_HINT,
            obj=op.name,
            id="oaken.E002",
        )
    widest = _widest_array(op.input_model.model_json_schema())
    if widest > bounds.get("INPUT_ARRAY_MAX", 0):
        yield Error(
            f"operation {op.name!r}: its input takes an array of up to {widest} items, more than "
            "OPERATIONS['INPUT_ARRAY_MAX'] lets through any door",
            hint="Raise INPUT_ARRAY_MAX (and INPUT_ITEMS_MAX), or take fewer.",
            obj=op.name,
            id="oaken.E007",
        )
    if op.role not in Role.values:
        yield Error(
            f"operation {op.name!r}: its role {op.role!r} is not a role",
            hint=f"One of {', '.join(Role.values)}.",
            obj=op.name,
            id="oaken.E003",
        )


def _widest_array(schema: Any) -> int:
    """The largest maxItems anywhere in a JSON schema (0 when none)."""
    widest, stack = 0, [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            limit = node.get("maxItems")
            if isinstance(limit, int):
                widest = max(widest, limit)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return widest


def _range_errors(
    bounds: Mapping[str, Any], ranges: Mapping[str, tuple[int, int | None, int | None]]
) -> Iterator[CheckMessage]:
    for name, (default, minimum, maximum) in ranges.items():
        for what, value in (("default", default), ("value", bounds.get(name))):
            if not isinstance(value, int) or isinstance(value, bool):
                yield Error(f"OPERATIONS[{name!r}]: its {what} is not an integer", obj=name, id="oaken.E004")
            elif (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
                yield Error(
                    f"OPERATIONS[{name!r}]: its {what} {value} lies outside its range "
                    f"({'-' if minimum is None else minimum} to {'-' if maximum is None else maximum})",
                    obj=name,
                    id="oaken.E004",
                )
    for name in bounds:
        if name not in ranges:
            yield Error(
                f"OPERATIONS[{name!r}] is declared without its range",
                hint="Declare it with _tunable(name, default, minimum=..., maximum=...).",
                obj=name,
                id="oaken.E005",
            )


def _order_errors(bounds: Mapping[str, Any], ordered: tuple[tuple[str, str], ...]) -> Iterator[CheckMessage]:
    for smaller, larger in ordered:
        low, high = bounds.get(smaller), bounds.get(larger)
        if not (isinstance(low, int) and isinstance(high, int)) or low > high:
            yield Error(
                f"OPERATIONS[{smaller!r}] must be an integer at most OPERATIONS[{larger!r}]",
                obj=smaller,
                id="oaken.E006",
            )
