"""PostgreSQL keeps every message's full-text document itself, and this migration builds the existing ones.

- `oaken_fold(text)`: lower case, accents off (Latin letters), so "Zürich", "ZURICH" and "zurich" meet; the
  `unaccent` extension would do it, but not every server (the embedded one among them) has it, and the query
  side is folded by the same function, so the two always agree.
- `search_document_of(message)`: subject (A) over sender and recipients (B) over the body (C) over the text
  of attachments (D), with the `simple` configuration: no stemming in one language for mail in several, and
  identifiers such as INV-20391 stay one searchable phrase.
- triggers: a statement trigger on new messages (one insert for a whole COPY), a row trigger when a
  message's words change (not on flags), and one on attachments; each marks the document as waiting for the
  enricher, and stamps it with the moment it changed (clock_timestamp, not the transaction's start: a search's
  later pages leave out documents changed after its first page, and a long import batch begun before that
  page must not pass for older than it is).
"""

from __future__ import annotations

import unicodedata

from django.db import migrations


def _fold_table() -> tuple[str, str]:
    """(accented, plain): every Latin letter U+00C0..U+024F that is a base letter plus marks."""
    accented, plain = [], []
    for code in range(0x00C0, 0x0250):
        char = chr(code)
        base = unicodedata.normalize("NFKD", char)
        if (
            len(base) > 1
            and base[0].isascii()
            and base[0].isalpha()
            and all(unicodedata.combining(c) for c in base[1:])
        ):
            accented.append(char)
            plain.append(base[0])
    return "".join(accented), "".join(plain)


ACCENTED, PLAIN = _fold_table()
# the part of a body or an attachment that is indexed: a tsvector holds at most 1 MB, positions up to 16,383
BODY_CHARS = 200_000

# built from constants of this file, never from input
FORWARD = f"""
CREATE FUNCTION oaken_fold(value text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    RETURN lower(translate(value, '{ACCENTED}', '{PLAIN}'));

CREATE FUNCTION search_addresses(addresses jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (
        SELECT string_agg(concat_ws(' ', entry->>'name', entry->>'address'), ' ')
        FROM jsonb_array_elements(CASE WHEN jsonb_typeof(addresses) = 'array' THEN addresses ELSE '[]' END) entry
    );

CREATE FUNCTION search_document_of(message uuid) RETURNS tsvector
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (
        SELECT setweight(to_tsvector('simple', coalesce(oaken_fold(m.subject), '')), 'A')
            || setweight(to_tsvector('simple', coalesce(oaken_fold(concat_ws(' ', m.sender_name, m.sender_address,
                    search_addresses(m.to_addresses), search_addresses(m.cc_addresses))), '')), 'B')
            || setweight(to_tsvector('simple', coalesce(oaken_fold(left(m.text_body, {BODY_CHARS})), '')), 'C')
            || setweight(to_tsvector('simple', coalesce(oaken_fold(left((
                    SELECT string_agg(a.extracted_text, ' ') FROM mail_attachment a WHERE a.message_id = m.id
                ), {BODY_CHARS})), '')), 'D')
        FROM mail_message m WHERE m.id = message
    );

CREATE FUNCTION search_messages_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_searchdocument (message_id, tenant_id, document, embedded_with_id, changed_at)
    SELECT n.id, n.tenant_id, search_document_of(n.id), NULL, clock_timestamp() FROM new_messages n
    ON CONFLICT (message_id) DO UPDATE SET document = EXCLUDED.document, embedded_with_id = NULL,
        changed_at = EXCLUDED.changed_at;
    RETURN NULL;
END $$;

CREATE TRIGGER search_messages_inserted AFTER INSERT ON mail_message
    REFERENCING NEW TABLE AS new_messages FOR EACH STATEMENT EXECUTE FUNCTION search_messages_inserted();

CREATE FUNCTION search_message_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE search_searchdocument SET document = search_document_of(NEW.id), embedded_with_id = NULL,
        changed_at = clock_timestamp()
    WHERE message_id = NEW.id;
    RETURN NULL;
END $$;

CREATE TRIGGER search_message_changed AFTER UPDATE ON mail_message FOR EACH ROW
    WHEN (OLD.subject IS DISTINCT FROM NEW.subject OR OLD.text_body IS DISTINCT FROM NEW.text_body
        OR OLD.sender_name IS DISTINCT FROM NEW.sender_name OR OLD.sender_address IS DISTINCT FROM NEW.sender_address
        OR OLD.to_addresses IS DISTINCT FROM NEW.to_addresses OR OLD.cc_addresses IS DISTINCT FROM NEW.cc_addresses)
    EXECUTE FUNCTION search_message_changed();

CREATE FUNCTION search_attachments_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE search_searchdocument d SET document = search_document_of(d.message_id), embedded_with_id = NULL,
        changed_at = clock_timestamp()
    WHERE d.message_id IN (SELECT a.message_id FROM changed_attachments a);
    RETURN NULL;
END $$;

CREATE TRIGGER search_attachments_inserted AFTER INSERT ON mail_attachment
    REFERENCING NEW TABLE AS changed_attachments FOR EACH STATEMENT EXECUTE FUNCTION search_attachments_changed();
CREATE TRIGGER search_attachments_deleted AFTER DELETE ON mail_attachment
    REFERENCING OLD TABLE AS changed_attachments FOR EACH STATEMENT EXECUTE FUNCTION search_attachments_changed();

-- the mail already held: its documents now, its embeddings by the enricher (every one waits)
INSERT INTO search_searchdocument (message_id, tenant_id, document, embedded_with_id, changed_at)
SELECT m.id, m.tenant_id, search_document_of(m.id), NULL, now() FROM mail_message m
ON CONFLICT (message_id) DO NOTHING;
"""  # noqa: S608

BACKWARD = """
DROP TRIGGER IF EXISTS search_attachments_deleted ON mail_attachment;
DROP TRIGGER IF EXISTS search_attachments_inserted ON mail_attachment;
DROP FUNCTION IF EXISTS search_attachments_changed();
DROP TRIGGER IF EXISTS search_message_changed ON mail_message;
DROP FUNCTION IF EXISTS search_message_changed();
DROP TRIGGER IF EXISTS search_messages_inserted ON mail_message;
DROP FUNCTION IF EXISTS search_messages_inserted();
DROP FUNCTION IF EXISTS search_document_of(uuid);
DROP FUNCTION IF EXISTS search_addresses(jsonb);
DROP FUNCTION IF EXISTS oaken_fold(text);
"""


class Migration(migrations.Migration):
    dependencies = [("search", "0001_initial"), ("mail", "0004_server_state")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
