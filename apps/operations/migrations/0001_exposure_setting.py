# The exposure settings moved from the gate app to the operations layer (the gate is above it, and the
# operations that change exposure must not import the gate). The table stays where it is: state only.

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

import apps.core.ids


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("gate", "0001_initial"),
        ("workspaces", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ExposureSetting",
                    fields=[
                        (
                            "id",
                            models.UUIDField(
                                default=apps.core.ids.new_id, editable=False, primary_key=True, serialize=False
                            ),
                        ),
                        ("target", models.CharField(max_length=200)),
                        ("level", models.CharField(choices=[("off", "Off"), ("on", "On")], max_length=3)),
                        ("updated_at", models.DateTimeField(default=django.utils.timezone.now)),
                        (
                            "tenant",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="workspaces.tenant"
                            ),
                        ),
                    ],
                    options={
                        "db_table": "gate_exposuresetting",
                        "constraints": [
                            models.UniqueConstraint(fields=("tenant", "target"), name="one_exposure_per_target")
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
