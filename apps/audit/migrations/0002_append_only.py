"""The database itself refuses to change or remove audit events, and lets a chain head only move forward.

TRUNCATE is not refused (row triggers do not fire on it): test databases are flushed that way.
"""

from django.db import migrations

INSTALL = """
CREATE FUNCTION audit_event_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit events are append-only: % of event % refused', TG_OP, OLD.id;
END
$$;
CREATE TRIGGER audit_event_append_only
    BEFORE UPDATE OR DELETE ON audit_auditevent
    FOR EACH ROW EXECUTE FUNCTION audit_event_refuse_change();

CREATE FUNCTION audit_chainhead_forward_only() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER audit_chainhead_forward_only
    BEFORE UPDATE OR DELETE ON audit_chainhead
    FOR EACH ROW EXECUTE FUNCTION audit_chainhead_forward_only();
"""

REMOVE = """
DROP TRIGGER IF EXISTS audit_chainhead_forward_only ON audit_chainhead;
DROP FUNCTION IF EXISTS audit_chainhead_forward_only();
DROP TRIGGER IF EXISTS audit_event_append_only ON audit_auditevent;
DROP FUNCTION IF EXISTS audit_event_refuse_change();
"""


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]

    operations = [migrations.RunSQL(INSTALL, REMOVE)]
