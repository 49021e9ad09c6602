"""Bulk writes through PostgreSQL COPY, for imports and sync where rows arrive by the thousand.

Django's bulk_create builds one statement with a placeholder per value; for message-sized rows
that costs more than parsing the mail. COPY streams typed rows instead. Callers pass the
tenant in every row like any other write; nothing here reads.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from django.db import connection, models

_COPY_TYPE_NAMES = {
    "timestamp with time zone": "timestamptz",
    "integer": "int4",
    "bigint": "int8",
    "smallint": "int2",
    "boolean": "bool",
}


def _copy_type(field: models.Field) -> str:
    db_type = field.db_type(connection) or "text"
    base = re.sub(r"\(\d+(,\s*\d+)?\)", "", db_type).strip()
    return _COPY_TYPE_NAMES.get(base, base)


def copy_rows(
    model: type[models.Model],
    columns: Sequence[str],
    rows: Collection[Sequence[object]],
    *,
    text_columns: Collection[str] = (),
    binary: bool = False,
) -> int:
    """Append rows (values in `columns` order) to the model's table; returns how many were written.

    Values of `text_columns` are given in PostgreSQL's text form (a UUID as a string, JSON or an array
    literal already serialized), which the server reads with the column's own input function: dumping
    the same tenant id, or an address list, again for every row is what costs. `binary` sends the
    rows in COPY's binary format, which for bytea spares escaping every byte (no text columns then)."""
    if not rows:
        return 0
    fields = {f.column: f for f in model._meta.concrete_fields}
    assert not (binary and text_columns), "text columns need the text format"
    types = ["text" if column in text_columns else _copy_type(fields[column]) for column in columns]
    quote = connection.ops.quote_name
    sql = f"COPY {quote(model._meta.db_table)} ({', '.join(quote(c) for c in columns)}) FROM STDIN"
    if binary:
        sql += " (FORMAT BINARY)"
    written = 0
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        copy.set_types(types)
        for row in rows:
            copy.write_row(row)
            written += 1
    return written
