"""The feed's writers: PostgreSQL triggers on the tables whose changes the feed reports (apps.events.models).

Each trigger is per statement, with its transition tables, and hands its events to `events_emit`, which numbers
them from the tenant's audit chain head (creating the head as the audit would: seq 0, the zero hash) and inserts
them, in one statement. Only ids and fixed words are written: the mail's own text never reaches the feed.
"""

from django.db import migrations

from apps.events.migrations._triggers import trigger as _trigger

EMIT = """
CREATE FUNCTION events_emit(p_tenant uuid[], p_type text[], p_workspace uuid[], p_account uuid[],
                            p_subject uuid[], p_data jsonb[]) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    WITH src AS (
        SELECT x.t, x.ty, x.w, x.a, x.s, x.d, x.o
        FROM unnest(p_tenant, p_type, p_workspace, p_account, p_subject, p_data) WITH ORDINALITY AS x(t, ty, w, a, s, d, o)
    ), counts AS (
        SELECT t, count(*) AS c FROM src GROUP BY t ORDER BY t
    ), bumped AS (
        INSERT INTO audit_chainhead AS h (tenant_id, seq, hash, event_seq, events_pruned)
        SELECT t, 0, repeat('0', 64), c, 0 FROM counts
        ON CONFLICT (tenant_id) DO UPDATE SET event_seq = h.event_seq + EXCLUDED.event_seq
        RETURNING h.tenant_id, h.event_seq
    )
    INSERT INTO events_event (id, tenant_id, seq, at, type, workspace_id, account_id, subject_id, data)
    SELECT gen_random_uuid(), s.t, b.event_seq - c.c + row_number() OVER (PARTITION BY s.t ORDER BY s.o),
           clock_timestamp(), s.ty, s.w, s.a, s.s, s.d
    FROM src s JOIN counts c ON c.t = s.t JOIN bumped b ON b.tenant_id = s.t;
END $$;
"""

TRIGGERS = [
    # new mail (not what the mailbox sent, nor its drafts)
    _trigger(
        "events_message_received",
        "mail_message",
        "INSERT",
        "NEW TABLE AS n",
        """SELECT n.tenant_id, 'message.received' AS type, acc.workspace_id, n.account_id, n.id AS subject_id,
                  '{}'::jsonb AS data, n.id AS k
           FROM n JOIN mail_mailaccount acc ON acc.id = n.account_id JOIN mail_folder f ON f.id = n.folder_id
           WHERE f.kind NOT IN ('sent', 'drafts')""",
    ),
    # its folder, read state or pin moved
    _trigger(
        "events_message_changed",
        "mail_message",
        "UPDATE",
        "OLD TABLE AS o NEW TABLE AS n",
        """SELECT n.tenant_id, 'message.changed' AS type, acc.workspace_id, n.account_id, n.id AS subject_id,
                  jsonb_build_object('changed', to_jsonb(array_remove(ARRAY[
                      CASE WHEN n.folder_id IS DISTINCT FROM o.folder_id THEN 'folder' END,
                      CASE WHEN n.read IS DISTINCT FROM o.read THEN 'read' END,
                      CASE WHEN n.pinned IS DISTINCT FROM o.pinned THEN 'pinned' END], NULL))) AS data,
                  n.id AS k
           FROM n JOIN o ON o.id = n.id JOIN mail_mailaccount acc ON acc.id = n.account_id
           WHERE n.folder_id IS DISTINCT FROM o.folder_id OR n.read IS DISTINCT FROM o.read
              OR n.pinned IS DISTINCT FROM o.pinned""",
    ),
    # gone (a message whose mailbox goes with it is not reported one by one)
    _trigger(
        "events_message_deleted",
        "mail_message",
        "DELETE",
        "OLD TABLE AS o",
        """SELECT o.tenant_id, 'message.deleted' AS type, acc.workspace_id, o.account_id, o.id AS subject_id,
                  '{}'::jsonb AS data, o.id AS k
           FROM o JOIN mail_mailaccount acc ON acc.id = o.account_id""",
    ),
    # its labels: one event per message and statement (of a message that still exists)
    *[
        _trigger(
            f"events_labels_{verb}",
            "mail_messagelabel",
            verb.upper(),
            f"{'NEW' if verb == 'insert' else 'OLD'} TABLE AS x",
            """SELECT m.tenant_id, 'message.changed' AS type, acc.workspace_id, m.account_id, m.id AS subject_id,
                      '{"changed": ["labels"]}'::jsonb AS data, m.id AS k
               FROM (SELECT DISTINCT message_id FROM x) ml JOIN mail_message m ON m.id = ml.message_id
               JOIN mail_mailaccount acc ON acc.id = m.account_id""",
        )
        for verb in ("insert", "delete")
    ],
    # drafts
    *[
        _trigger(
            f"events_draft_{verb}",
            "outbound_draft",
            verb.upper(),
            f"{'OLD' if verb == 'delete' else 'NEW'} TABLE AS x",
            f"""SELECT x.tenant_id, 'draft.{past}' AS type, acc.workspace_id, x.account_id, x.id AS subject_id,
                       '{{}}'::jsonb AS data, x.id AS k
                FROM x JOIN mail_mailaccount acc ON acc.id = x.account_id""",  # noqa: S608 (fixed words)
        )
        for verb, past in (("insert", "created"), ("update", "updated"), ("delete", "deleted"))
    ],
    # an outbound request's every state (SPEC §10), and a person's approval needed
    _trigger(
        "events_outbound_new",
        "outbound_outboundrequest",
        "INSERT",
        "NEW TABLE AS n",
        """SELECT n.tenant_id, 'outbound.' || n.state AS type, acc.workspace_id, n.account_id, n.id AS subject_id,
                  jsonb_build_object('state', n.state) AS data, n.id::text || '1' AS k
           FROM n JOIN mail_mailaccount acc ON acc.id = n.account_id
           UNION ALL
           SELECT n.tenant_id, 'approval.needed', acc.workspace_id, n.account_id, n.id, '{}'::jsonb, n.id::text || '2'
           FROM n JOIN mail_mailaccount acc ON acc.id = n.account_id WHERE n.state = 'awaiting_approval'""",
    ),
    _trigger(
        "events_outbound_moved",
        "outbound_outboundrequest",
        "UPDATE",
        "OLD TABLE AS o NEW TABLE AS n",
        """SELECT n.tenant_id, 'outbound.' || n.state AS type, acc.workspace_id, n.account_id, n.id AS subject_id,
                  jsonb_build_object('state', n.state, 'from', o.state) AS data, n.id::text || '1' AS k
           FROM n JOIN o ON o.id = n.id JOIN mail_mailaccount acc ON acc.id = n.account_id
           WHERE n.state IS DISTINCT FROM o.state
           UNION ALL
           SELECT n.tenant_id, 'approval.needed', acc.workspace_id, n.account_id, n.id, '{}'::jsonb, n.id::text || '2'
           FROM n JOIN o ON o.id = n.id JOIN mail_mailaccount acc ON acc.id = n.account_id
           WHERE n.state = 'awaiting_approval' AND o.state IS DISTINCT FROM 'awaiting_approval'""",
    ),
    # a rule acted on a message
    _trigger(
        "events_rule_applied",
        "rules_ruleapplication",
        "INSERT",
        "NEW TABLE AS n",
        """SELECT n.tenant_id, 'rule.applied' AS type, r.workspace_id, m.account_id, n.message_id AS subject_id,
                  jsonb_build_object('rule_id', n.rule_id, 'version', n.version) AS data, n.id AS k
           FROM n JOIN rules_rule r ON r.id = n.rule_id JOIN mail_message m ON m.id = n.message_id""",
    ),
    # a mailbox stopped syncing, or its provider wants it reconnected
    _trigger(
        "events_account_state",
        "mail_mailaccount",
        "UPDATE",
        "OLD TABLE AS o NEW TABLE AS n",
        """SELECT n.tenant_id, 'account.sync_failed' AS type, n.workspace_id, n.id AS account_id, n.id AS subject_id,
                  jsonb_build_object('error', n.sync_error) AS data, n.id::text || '1' AS k
           FROM n JOIN o ON o.id = n.id
           WHERE n.sync_error <> '' AND n.sync_error IS DISTINCT FROM o.sync_error
           UNION ALL
           SELECT n.tenant_id, 'account.needs_reconnect', n.workspace_id, n.id, n.id, '{}'::jsonb, n.id::text || '2'
           FROM n JOIN o ON o.id = n.id
           WHERE n.oauth_state = 'needs_reconnect' AND o.oauth_state IS DISTINCT FROM 'needs_reconnect'""",
    ),
]


class Migration(migrations.Migration):
    dependencies = [
        ("events", "0001_event_feed"),
        ("audit", "0006_event_feed_counter"),
        ("mail", "0014_ai_labels"),
        ("outbound", "0010_forwarding_rules"),
        ("rules", "0001_rules"),
    ]

    operations = [
        migrations.RunSQL(
            EMIT, "DROP FUNCTION IF EXISTS events_emit(uuid[], text[], uuid[], uuid[], uuid[], jsonb[]);"
        ),
        *[migrations.RunSQL(create, drop) for create, drop in TRIGGERS],
    ]
