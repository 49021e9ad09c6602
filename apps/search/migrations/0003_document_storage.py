"""A document is kept uncompressed in its row up to about 8 kB (MAIN storage, toast_tuple_target 8160).

Ranking reads the document of every message the words match: by default PostgreSQL compresses any row
over 2 kB and moves it to the TOAST table, and at 100,000 messages a third of the documents were there,
so ranking 3,800 matches spent more time decompressing and fetching them than ranking (24 ms against
12 ms with the documents in their rows; 216 ms against 116 ms for 27,000 matches). The table is smaller
too (225 MB against 288 MB with its TOAST table). Longer documents are still compressed, and moved out of
the row when that is not enough. Rows written before keep their storage until their words change.
"""

from __future__ import annotations

from django.db import migrations

FORWARD = """
ALTER TABLE search_searchdocument ALTER COLUMN document SET STORAGE MAIN;
ALTER TABLE search_searchdocument SET (toast_tuple_target = 8160);
"""

BACKWARD = """
ALTER TABLE search_searchdocument RESET (toast_tuple_target);
ALTER TABLE search_searchdocument ALTER COLUMN document SET STORAGE EXTENDED;
"""


class Migration(migrations.Migration):
    dependencies = [("search", "0002_documents")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
