"""What the feed's triggers share (migrations 0002, 0003): a statement trigger that hands its events to
`events_emit`. Not a migration (a module whose name starts with an underscore is not read as one)."""

# each trigger: SELECT its events into arrays, in a stable order, and emit them when there are any
_BODY = """
DECLARE
    t uuid[]; ty text[]; w uuid[]; a uuid[]; s uuid[]; d jsonb[];
BEGIN
    SELECT array_agg(e.tenant_id ORDER BY e.k), array_agg(e.type ORDER BY e.k), array_agg(e.workspace_id ORDER BY e.k),
           array_agg(e.account_id ORDER BY e.k), array_agg(e.subject_id ORDER BY e.k), array_agg(e.data ORDER BY e.k)
    INTO t, ty, w, a, s, d
    FROM ({select}) AS e;
    IF t IS NOT NULL THEN
        PERFORM events_emit(t, ty, w, a, s, d);
    END IF;
    RETURN NULL;
END
"""


def trigger(name: str, table: str, when: str, referencing: str, select: str) -> tuple[str, str]:
    """(CREATE, DROP) of a trigger `name` on `table` whose events are the rows of `select`: tenant_id, type,
    workspace_id, account_id, subject_id, data, and k (their order)."""
    create = f"""
CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $${_BODY.replace("{select}", select)}$$;
CREATE TRIGGER {name} AFTER {when} ON {table} REFERENCING {referencing} FOR EACH STATEMENT EXECUTE FUNCTION {name}();
"""
    drop = f"DROP TRIGGER IF EXISTS {name} ON {table}; DROP FUNCTION IF EXISTS {name}();"
    return create, drop


# a string of a column that may hold an id of another shape (a budget named by a test's "key-1"): a uuid, or NULL
UUID_PATTERN = "'^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'"


def utc(column: str) -> str:
    """A moment in an event's data, one spelling whatever the session's time zone: ISO 8601, to the second, UTC."""
    return f"""to_char(({column}) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')"""
