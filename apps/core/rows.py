"""Plain SQL reads of the hottest paths (a credential's lookup, a membership's, a message's): rows in binary, and
the columns of a model in its own field order, to make instances straight from a row (Model.from_db)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection
from django.db.backends.utils import CursorWrapper
from django.db.models import Field, Model
from psycopg.pq import Format


@contextmanager
def binary_rows() -> Iterator[CursorWrapper]:
    """A cursor whose rows come back in binary, read by psycopg's own C loaders: in text, every timestamp goes
    through Django's time-zone loader, in Python. Timestamps, UUIDs, booleans, integers, text and arrays of text
    load the same in both; select JSON as text (binary jsonb would come back parsed)."""
    with connection.cursor() as cursor:
        cursor.cursor.format = Format.BINARY
        yield cursor


def fields_of(model: type[Model], only: set[str] | None = None) -> list[Field[Any, Any]]:
    """The model's columns in its field order (the order Model.from_db reads a subset in), or those of `only`."""
    return [f for f in model._meta.concrete_fields if only is None or f.attname in only]
