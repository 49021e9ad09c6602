"""The event feed's numbers on the tenant's chain head (apps.events): one lock per tenant for both logs. The head's
guard (0002) learns the second way a head may move: the audit advances by exactly one event; the feed moves its own
two numbers forward only, leaving the audit's seq and hash exactly as they were."""

from django.db import migrations, models

GUARD = """
CREATE OR REPLACE FUNCTION audit_chainhead_forward_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'audit chain heads are never deleted (tenant %)', OLD.tenant_id;
    END IF;
    IF NEW.tenant_id <> OLD.tenant_id OR NEW.event_seq < OLD.event_seq OR NEW.events_pruned < OLD.events_pruned THEN
        RAISE EXCEPTION 'audit chain head of tenant % may only move forward', OLD.tenant_id;
    END IF;
    IF NEW.seq = OLD.seq + 1 THEN
        RETURN NEW;
    END IF;
    IF NEW.seq <> OLD.seq OR NEW.hash <> OLD.hash THEN
        RAISE EXCEPTION 'audit chain head of tenant % may only advance by one event', OLD.tenant_id;
    END IF;
    RETURN NEW;
END
$$;
"""

ORIGINAL = """
CREATE OR REPLACE FUNCTION audit_chainhead_forward_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'audit chain heads are never deleted (tenant %)', OLD.tenant_id;
    END IF;
    IF NEW.tenant_id <> OLD.tenant_id OR NEW.seq <> OLD.seq + 1 THEN
        RAISE EXCEPTION 'audit chain head of tenant % may only advance by one event', OLD.tenant_id;
    END IF;
    RETURN NEW;
END
$$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0005_credential_kind_autoreply"),
    ]

    operations = [
        migrations.AddField(
            model_name="chainhead",
            name="event_seq",
            field=models.BigIntegerField(db_default=0, default=0),
        ),
        migrations.AddField(
            model_name="chainhead",
            name="events_pruned",
            field=models.BigIntegerField(db_default=0, default=0),
        ),
        migrations.RunSQL(GUARD, ORIGINAL),
    ]
