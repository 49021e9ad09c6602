"""The plugin bridge: installed packages add operations named <plugin>.<name> (SPEC §17).

A plugin exposes an entry point in the group `oaken.plugins` that returns its operations
(built with `registry.operation(..., plugin=NAME, target=...)` semantics). They pass the same
definition rules and gate as every other operation and start switched off for agents.
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points

from apps.operations.registry import DefinitionError, Operation, registry

log = logging.getLogger("oaken.plugins")
ENTRY_POINT_GROUP = "oaken.plugins"

_health: dict[str, bool] = {}


def plugin_health(plugin: str) -> bool:
    """An unhealthy (or unknown) plugin offers nothing."""
    return _health.get(plugin, False)


def set_plugin_health(plugin: str, healthy: bool) -> None:
    _health[plugin] = healthy


def load_plugins() -> list[str]:
    """Register every installed plugin's operations; a plugin that fails to load is left out, unhealthy."""
    loaded = []
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            operations: list[Operation] = list(entry.load()())
            for op in operations:
                if op.plugin != entry.name:
                    raise DefinitionError(f"{op.name!r}: declared by plugin {entry.name!r} under another name")
                registry.add(op)
        except DefinitionError:
            raise
        except Exception as exc:  # a broken plugin must not take the service down; its type is enough
            log.error("plugin %s failed to load: %s", entry.name, type(exc).__name__)
            set_plugin_health(entry.name, False)
            continue
        set_plugin_health(entry.name, True)
        loaded.append(entry.name)
    return loaded
