"""Bulk writes through PostgreSQL COPY, for imports and sync where rows arrive by the thousand.

Django's bulk_create builds one statement with a placeholder per value; for message-sized rows
that costs more than parsing the mail. COPY streams typed rows instead. Callers pass the
tenant in every row like any other write; nothing here reads.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence

from django.db import connection, models
from psycopg.types.json import set_json_dumps

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


def text_array(values: Iterable[str]) -> str:
    """The PostgreSQL text[] literal of these strings (psycopg's own list adapter costs microseconds an item)."""
    return "{" + ",".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values) + "}"


def copy_rows(model: type[models.Model], columns: Sequence[str], rows: Collection[Sequence[object]]) -> int:
    """Append rows (values in `columns` order) to the model's table; returns how many were written.

    Rows go in COPY's binary format, which PostgreSQL reads without parsing text (and bytea without
    unescaping every byte). Values are Python values of the columns' types, except that JSON columns
    take their value already serialized: the same address list, serialized once, serves many rows."""
    if not rows:
        return 0
    fields = {f.column: f for f in model._meta.concrete_fields}
    types = [_copy_type(fields[column]) for column in columns]
    quote = connection.ops.quote_name
    sql = f"COPY {quote(model._meta.db_table)} ({', '.join(quote(c) for c in columns)}) FROM STDIN (FORMAT BINARY)"
    written = 0
    with connection.cursor() as cursor:
        set_json_dumps(_serialized, cursor.cursor)
        with cursor.cursor.copy(sql) as copy:
            copy.set_types(types)
            for row in rows:
                copy.write_row(row)
                written += 1
    return written


def _serialized(value: object) -> str:
    assert isinstance(value, str), "JSON columns take serialized JSON"
    return value
