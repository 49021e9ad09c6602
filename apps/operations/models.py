"""What the operations layer keeps: each tenant's exposure settings (SPEC §6) and plugin settings (§17)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from apps.core.encryption import EncryptedJSONField
from apps.core.tenancy import TenantOwned


class ExposureLevel(models.TextChoices):
    OFF = "off", "Off"
    ON = "on", "On"


class ExposureSetting(TenantOwned):
    """A tenant's choice for one operation (`name`) or a whole plugin (`plugin:<name>`)."""

    target = models.CharField(max_length=200)
    level = models.CharField(max_length=3, choices=ExposureLevel.choices)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        # the table the gate app created, kept where it is
        db_table = "gate_exposuresetting"
        constraints = [models.UniqueConstraint(fields=["tenant", "target"], name="one_exposure_per_target")]


class PluginSettings(TenantOwned):
    """A tenant's settings for one plugin, validated against the plugin's settings schema; stored encrypted (a
    plugin's settings may hold an API key)."""

    plugin = models.CharField(max_length=40)
    values = EncryptedJSONField()
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "plugin"], name="one_settings_per_plugin")]
