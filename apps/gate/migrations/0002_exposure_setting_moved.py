# The exposure settings now belong to the operations app (its 0001 takes the same table over): state only.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("gate", "0001_initial"),
        ("operations", "0001_exposure_setting"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="ExposureSetting")],
            database_operations=[],
        ),
    ]
