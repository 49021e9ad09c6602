"""`events_emit` also wakes whoever waits for new mail of an account (wait_for_message, apps.events.wake): a
NOTIFY on the channel `oaken_wake` whose payload is the account's id, nothing else. PostgreSQL delivers it when the
transaction commits (never for one rolled back) and folds identical ones of a transaction into one, so an import
of thousands of messages into one mailbox wakes its waiters once."""

import importlib

from django.db import migrations

EMIT = importlib.import_module("apps.events.migrations.0002_triggers").EMIT

WAKE = """
    PERFORM pg_notify('oaken_wake', x.a::text)
    FROM (SELECT DISTINCT u.a FROM unnest(p_type, p_account) AS u(ty, a)
          WHERE u.ty = 'message.received' AND u.a IS NOT NULL) AS x;
END $$;
"""


def _with_wake(emit: str) -> str:
    body, end = emit.rsplit("END $$;", 1)
    assert not end.strip()
    return body.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1) + WAKE


class Migration(migrations.Migration):
    dependencies = [("events", "0004_connection_expiring")]

    operations = [
        migrations.RunSQL(_with_wake(EMIT), EMIT.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)),
    ]
