from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("outbound", "0004_sender_name"),
    ]

    operations = [
        migrations.AddField(
            model_name="outboundrequest",
            name="reject_reason",
            field=models.TextField(blank=True, default=""),
        ),
    ]
