"""A tenant's settings for a plugin, as stored (docs/plugins.md): read for each call of the plugin and for the
admin's list, written by set_plugin_settings once they were checked against the plugin's settings schema."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from apps.operations.models import PluginSettings

if TYPE_CHECKING:
    from apps.workspaces.models import Tenant


def settings_of(tenant: Tenant, plugin: str) -> dict[str, Any]:
    """The tenant's settings for the plugin (empty when none were set)."""
    stored = PluginSettings.objects.for_tenant(tenant).filter(plugin=plugin).values_list("values", flat=True).first()
    return dict(stored or {})


def store_settings(*, tenant: Tenant, plugin: str, values: dict[str, Any], now: datetime) -> None:
    """Keep the tenant's settings for the plugin, replacing those it had (the caller checked them; they are
    stored encrypted)."""
    PluginSettings.objects.for_tenant(tenant).update_or_create(
        tenant=tenant, plugin=plugin, defaults={"values": values, "updated_at": now}
    )
