# Sync state for mirroring the server: which flags wait to be pushed, since when a message is missing from the
# server, and how many UIDs a folder had. Messages of IMAP accounts whose server UID was already unknown (gone
# in an earlier UIDVALIDITY change, or moved without the server saying where) count as missing from now on.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("mail", "0003_imap_sync"),
        ("workspaces", "0002_invitation"),
    ]

    operations = [
        migrations.AddField(
            model_name="folder",
            name="imap_uid_count",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="message",
            name="flags_pending",
            field=models.PositiveSmallIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="message",
            name="flags_pending_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="message",
            name="imap_missing_since",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(("imap_missing_since__isnull", False)),
                fields=["account", "imap_missing_since"],
                name="message_missing_on_server",
            ),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(("flags_pending_at__isnull", False)),
                fields=["account"],
                name="message_flags_pending",
            ),
        ),
        migrations.RunSQL(
            """
            UPDATE mail_message SET imap_missing_since = now()
             WHERE imap_uid IS NULL AND account_id IN (SELECT id FROM mail_mailaccount WHERE kind = 'imap')
            """,
            migrations.RunSQL.noop,
        ),
    ]
