"""What the operations layer keeps: each tenant's exposure settings (SPEC §6)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from apps.workspaces.tenancy import TenantOwned


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
