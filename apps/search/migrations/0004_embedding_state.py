"""Which model embedded a message moves from its document to a narrow table of its own (EmbeddingState).

Every mark the enricher made on the document (`embedded_with`) wrote a new version of the row holding the
tsvector and entered all its words into the GIN index again. The triggers now keep both tables: a new
message gets a document and a waiting state; a change of its words or attachments rewrites the document and
sets the state waiting again. The states are copied from the documents before the column goes.
"""

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models

# the trigger functions of migration 0002, keeping the state in its own table
FORWARD = """
INSERT INTO search_embeddingstate (message_id, tenant_id, model_id)
SELECT message_id, tenant_id, embedded_with_id FROM search_searchdocument
ON CONFLICT (message_id) DO NOTHING;

CREATE OR REPLACE FUNCTION search_messages_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_searchdocument (message_id, tenant_id, document, changed_at)
    SELECT n.id, n.tenant_id, search_document_of(n.id), clock_timestamp() FROM new_messages n
    ON CONFLICT (message_id) DO UPDATE SET document = EXCLUDED.document, changed_at = EXCLUDED.changed_at;
    INSERT INTO search_embeddingstate (message_id, tenant_id, model_id)
    SELECT n.id, n.tenant_id, NULL FROM new_messages n
    ON CONFLICT (message_id) DO UPDATE SET model_id = NULL;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION search_message_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE search_searchdocument SET document = search_document_of(NEW.id), changed_at = clock_timestamp()
    WHERE message_id = NEW.id;
    UPDATE search_embeddingstate SET model_id = NULL WHERE message_id = NEW.id AND model_id IS NOT NULL;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION search_attachments_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE search_searchdocument d SET document = search_document_of(d.message_id), changed_at = clock_timestamp()
    WHERE d.message_id IN (SELECT a.message_id FROM changed_attachments a);
    UPDATE search_embeddingstate s SET model_id = NULL
    WHERE s.message_id IN (SELECT a.message_id FROM changed_attachments a) AND s.model_id IS NOT NULL;
    RETURN NULL;
END $$;
"""

# the functions of migration 0002, and the states back on the documents (the column is back by then)
BACKWARD = """
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

UPDATE search_searchdocument d SET embedded_with_id = s.model_id
FROM search_embeddingstate s WHERE s.message_id = d.message_id;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("mail", "0004_server_state"),
        ("search", "0003_document_storage"),
        ("workspaces", "0002_invitation"),
    ]

    operations = [
        migrations.CreateModel(
            name="EmbeddingState",
            fields=[
                (
                    "message",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="embedding_state",
                        serialize=False,
                        to="mail.message",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="workspaces.tenant"
                    ),
                ),
                (
                    "model",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to="search.embeddingmodel",
                    ),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="embeddingstate",
            index=models.Index(
                condition=models.Q(("model__isnull", True)), fields=["tenant"], name="search_state_waiting"
            ),
        ),
        # the backward SQL runs with embedded_with back (operations are reversed in order)
        migrations.RunSQL(FORWARD, BACKWARD),
        migrations.RemoveIndex(model_name="searchdocument", name="search_document_waiting"),
        migrations.RemoveField(model_name="searchdocument", name="embedded_with"),
    ]
