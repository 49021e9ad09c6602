"""The feed's `connection.expiring` (as migration 0002's writers): an API key's or OAuth connection's deadline near.

Written by the beat's mark of the deadline it warned about (apps.agents.services.notice_expiring sets
`expiry_noticed`; once per credential and deadline). A credential concerns its tenant and its person, not one mailbox:
no workspace. A persons' event (apps.events.feed.PERSONS_ONLY): ids and fixed words only.
"""

from django.db import migrations

from apps.events.migrations._triggers import trigger, utc

CONNECTION_EXPIRING = [
    trigger(
        f"events_{table}_expiring",
        f"agents_{table}",
        "UPDATE",
        "OLD TABLE AS o NEW TABLE AS n",
        f"""SELECT n.tenant_id, 'connection.expiring' AS type, NULL::uuid AS workspace_id, NULL::uuid AS account_id,
                   n.id AS subject_id,
                   jsonb_build_object('credential', '{kind}', 'person_id', n.user_id,
                                      'expires_at', {utc("n.expires_at")}) AS data,
                   n.id AS k
            FROM n JOIN o ON o.id = n.id
            WHERE n.expiry_noticed IS NOT NULL AND n.expiry_noticed IS DISTINCT FROM o.expiry_noticed""",  # noqa: S608
    )
    for table, kind in (("apikey", "apikey"), ("connection", "oauth"))
]


class Migration(migrations.Migration):
    dependencies = [
        ("events", "0003_budget_exhausted"),
        ("agents", "0004_expiry_noticed"),
    ]

    operations = [migrations.RunSQL(create, drop) for create, drop in CONNECTION_EXPIRING]
