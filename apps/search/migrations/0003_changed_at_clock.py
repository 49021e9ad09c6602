"""A document's changed_at is the moment it changed (clock_timestamp), not its transaction's start (now()).

A search's later pages leave out documents changed after its first page; a long transaction (an import
batch) that began before that page would otherwise stamp its rows as older than they are.
"""

from __future__ import annotations

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION search_messages_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_searchdocument (message_id, tenant_id, document, embedded_with_id, changed_at)
    SELECT n.id, n.tenant_id, search_document_of(n.id), NULL, clock_timestamp() FROM new_messages n
    ON CONFLICT (message_id) DO UPDATE SET document = EXCLUDED.document, embedded_with_id = NULL,
        changed_at = EXCLUDED.changed_at;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION search_message_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE search_searchdocument SET document = search_document_of(NEW.id), embedded_with_id = NULL,
        changed_at = clock_timestamp()
    WHERE message_id = NEW.id;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION search_attachments_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE search_searchdocument d SET document = search_document_of(d.message_id), embedded_with_id = NULL,
        changed_at = clock_timestamp()
    WHERE d.message_id IN (SELECT a.message_id FROM changed_attachments a);
    RETURN NULL;
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [("search", "0002_documents")]

    operations = [migrations.RunSQL(FORWARD, migrations.RunSQL.noop)]
