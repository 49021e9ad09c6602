"""Every tunable bound, in one place (SPEC §11)."""

from __future__ import annotations

from config.env import env_int

# name -> (default, minimum, maximum) of every bound below, for the start-up check (apps.operations.checks)
OPERATIONS_RANGES: dict[str, tuple[int, int | None, int | None]] = {}


def _tunable(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """A bound: OAKEN_<name> from the environment, within its range, else the default."""
    OPERATIONS_RANGES[name] = (default, minimum, maximum)
    return env_int(f"OAKEN_{name}", default, minimum=minimum, maximum=maximum)


OPERATIONS = {
    # import
    "IMPORT_BATCH_SIZE": _tunable("IMPORT_BATCH_SIZE", 500, minimum=1, maximum=5000),
    "IMPORT_MAX_MESSAGE_BYTES": _tunable("IMPORT_MAX_MESSAGE_BYTES", 50 * 1024 * 1024, minimum=1024),
    # an mbox, .eml or zip file uploaded in the console (upload_import): refused past this many bytes, before it
    # is read when the request says its length, else as soon as the bytes read pass it
    "IMPORT_UPLOAD_MAX_BYTES": _tunable("IMPORT_UPLOAD_MAX_BYTES", 1 << 30, minimum=1024),
    # an import queued or running that has not moved (no batch committed) for this long is marked failed: its
    # worker was lost or its task never came (the sweep runs every five minutes)
    "IMPORT_STALE_SECONDS": _tunable("IMPORT_STALE_SECONDS", 1800, minimum=60, maximum=86_400),
    # threading: a reply-prefixed subject joins an earlier thread with the same subject this recent
    "THREAD_SUBJECT_WINDOW_DAYS": _tunable("THREAD_SUBJECT_WINDOW_DAYS", 60, minimum=0),
    # text kept for search from a text attachment
    "ATTACHMENT_TEXT_MAX_CHARS": _tunable("ATTACHMENT_TEXT_MAX_CHARS", 200_000, minimum=0),
    # lists: a page is at most this long; a larger `limit` is refused, never cut
    "PAGE_SIZE_DEFAULT": _tunable("PAGE_SIZE_DEFAULT", 50, minimum=1),
    "PAGE_SIZE_MAX": _tunable("PAGE_SIZE_MAX", 200, minimum=1),
    # an audit chain's export: events per page (the default and the most a page may ask for)
    "AUDIT_EXPORT_PAGE_MAX": _tunable("AUDIT_EXPORT_PAGE_MAX", 2000, minimum=1, maximum=50_000),
    # the audit log's folded console reads: how many of the newest events of a page's stretch are counted (the
    # count is a scan of that stretch; older reads in it are said to be left uncounted)
    "AUDIT_FOLD_SCAN_MAX": _tunable("AUDIT_FOLD_SCAN_MAX", 50_000, minimum=1, maximum=1_000_000),
    # batches: ids per call
    "BATCH_MAX": _tunable("BATCH_MAX", 500, minimum=1),
    "LABELS_PER_CALL_MAX": _tunable("LABELS_PER_CALL_MAX", 20, minimum=1),
    "SUMMARIZE_MAX": _tunable("SUMMARIZE_MAX", 20, minimum=1),
    "THREAD_MAX_MESSAGES": _tunable("THREAD_MAX_MESSAGES", 200, minimum=1),
    # a call's input, at every door (apps.gate.payload): items of one array (or fields of one object), and items
    # in all; past either it is refused (LIMIT_EXCEEDED, naming the array) before it is parsed or validated. No
    # operation takes more than BATCH_MAX ids in one array: a flat array of millions of numbers, parsed and
    # validated, would hold a web worker for tens of seconds
    "INPUT_ARRAY_MAX": _tunable("INPUT_ARRAY_MAX", 1000, minimum=1, maximum=100_000),
    "INPUT_ITEMS_MAX": _tunable("INPUT_ITEMS_MAX", 10_000, minimum=1, maximum=1_000_000),
    # a message's attachments that get_message lists (by file name): past it the list is cut, and the answer says
    # so (attachments_truncated + attachment_count)
    "MESSAGE_ATTACHMENTS_MAX": _tunable("MESSAGE_ATTACHMENTS_MAX", 100, minimum=1, maximum=10_000),
    # texts: cut, and the answer says so (truncated + full length)
    "TEXT_MAX_CHARS": _tunable("TEXT_MAX_CHARS", 20_000, minimum=100),
    "SUMMARY_MAX_CHARS": _tunable("SUMMARY_MAX_CHARS", 400, minimum=50),
    # summaries: how long a call waits for the workers (what is not done by then answers pending, and is in
    # the cache for the next call), how long a claimed summary may stay pending before another call queues it
    # again (a worker lost with it), and how many new messages a tenant's opted-in accounts get summarized an hour
    "SUMMARY_WAIT_SECONDS": _tunable("SUMMARY_WAIT_SECONDS", 10, minimum=1, maximum=120),
    "SUMMARY_PENDING_MAX_SECONDS": _tunable("SUMMARY_PENDING_MAX_SECONDS", 600, minimum=30, maximum=86400),
    "SUMMARIES_NEW_MAIL_PER_HOUR": _tunable("SUMMARIES_NEW_MAIL_PER_HOUR", 200, minimum=0, maximum=100_000),
    # any other text taken from mail (a subject, a name, a file name): cut past this, ending in CUT_MARK
    "MAIL_FIELD_MAX_CHARS": _tunable("MAIL_FIELD_MAX_CHARS", 2000, minimum=100, maximum=100_000),
    "QUERY_MAX_CHARS": _tunable("QUERY_MAX_CHARS", 500, minimum=10),
    # a message's HTML part shown to a person (get_message_html): cut past this many characters, and says so
    "HTML_MAX_CHARS": _tunable("HTML_MAX_CHARS", 1_000_000, minimum=1000),
    "RAW_MESSAGE_MAX_BYTES": _tunable("RAW_MESSAGE_MAX_BYTES", 10 * 1024 * 1024, minimum=1024),
    # confirmation: small reversible changes up to this many items pass unconfirmed
    "CONFIRM_FREE_MAX": _tunable("CONFIRM_FREE_MAX", 10, minimum=0),
    # snooze_messages: how far ahead a message may be snoozed (a later time is refused, never cut)
    "SNOOZE_MAX_DAYS": _tunable("SNOOZE_MAX_DAYS", 366, minimum=1, maximum=3660),
    # waiting for reply (list_awaiting_reply): a thread whose last message the mailbox's own side wrote this many
    # days ago or more, with no answer since, for a person who never chose their own number (set_preferences);
    # and the most a person may choose
    "AWAITING_REPLY_DAYS": _tunable("AWAITING_REPLY_DAYS", 3, minimum=1, maximum=60),
    "AWAITING_REPLY_DAYS_MAX": _tunable("AWAITING_REPLY_DAYS_MAX", 60, minimum=1, maximum=3650),
    # ... and how much longer a thread may have waited and still be listed (or nudged): a wait older than N days plus
    # this is over. It bounds the threads a listing walks to find its page (apps.mail.awaiting): with none waiting,
    # a page walks the threads of this window, never the whole mailbox's history
    "AWAITING_REPLY_WINDOW_DAYS": _tunable("AWAITING_REPLY_WINDOW_DAYS", 90, minimum=1, maximum=3650),
    "CONFIRMATION_TTL_SECONDS": _tunable("CONFIRMATION_TTL_SECONDS", 120, minimum=10),
    "CONFIRMATION_TOKENS_PER_CALLER": _tunable("CONFIRMATION_TOKENS_PER_CALLER", 5, minimum=1),
    # tenancy: workspaces per tenant, open invitations per tenant, and how long an invitation link works
    "WORKSPACES_MAX": _tunable("WORKSPACES_MAX", 100, minimum=1),
    # a person's own named sets of tools (apps.operations.defs.tool_sets), per person and tenant
    "TOOL_SETS_MAX": _tunable("TOOL_SETS_MAX", 50, minimum=1),
    "INVITATIONS_OPEN_MAX": _tunable("INVITATIONS_OPEN_MAX", 100, minimum=1),
    "INVITATION_TTL_DAYS": _tunable("INVITATION_TTL_DAYS", 7, minimum=1, maximum=90),
    # an invitation link opened by someone not signed in: the signed reference the sign-up or sign-in that follows
    # carries (in the session, in the address confirmation link) works this long; and such a person may open at
    # most this many invitation links per client address within the window (past it: the page says try later)
    "INVITATION_REFERENCE_TTL_SECONDS": _tunable(
        "INVITATION_REFERENCE_TTL_SECONDS", 3 * 24 * 3600, minimum=600, maximum=30 * 24 * 3600
    ),
    "INVITATION_PAGE_PER_CLIENT": _tunable("INVITATION_PAGE_PER_CLIENT", 30, minimum=1),
    "INVITATION_PAGE_WINDOW_SECONDS": _tunable("INVITATION_PAGE_WINDOW_SECONDS", 600, minimum=60),
    # sign-in (apps/accounts/signin.py): this many failures for one address from one client within the window
    # lock that address for that client until the window ends; other clients are not held back; and this many
    # failures for one address from all clients together slow it, never lock it: one attempt per
    # SIGN_IN_SLOW_SECONDS, from any client, until the window ends
    "SIGN_IN_MAX_FAILURES": _tunable("SIGN_IN_MAX_FAILURES", 5, minimum=1),
    "SIGN_IN_WINDOW_SECONDS": _tunable("SIGN_IN_WINDOW_SECONDS", 900, minimum=60),
    "SIGN_IN_ADDRESS_CEILING": _tunable("SIGN_IN_ADDRESS_CEILING", 50, minimum=1),
    "SIGN_IN_SLOW_SECONDS": _tunable("SIGN_IN_SLOW_SECONDS", 30, minimum=1),
    # mail sent on request (sign-up, password reset): at most this many per address, and per client address,
    # within the window; past either bound the page answers as usual and nothing is sent
    "ACCOUNT_MAIL_PER_ADDRESS": _tunable("ACCOUNT_MAIL_PER_ADDRESS", 3, minimum=1),
    "ACCOUNT_MAIL_PER_CLIENT": _tunable("ACCOUNT_MAIL_PER_CLIENT", 20, minimum=1),
    "ACCOUNT_MAIL_WINDOW_SECONDS": _tunable("ACCOUNT_MAIL_WINDOW_SECONDS", 3600, minimum=60),
    # OAuth open registration: at most this many registrations per client address per hour, and this many in
    # all per hour, so a flood spread over many addresses cannot grow the table unbounded
    "OAUTH_REGISTRATIONS_PER_HOUR": _tunable("OAUTH_REGISTRATIONS_PER_HOUR", 30, minimum=1),
    "OAUTH_REGISTRATIONS_ALL_PER_HOUR": _tunable("OAUTH_REGISTRATIONS_ALL_PER_HOUR", 2000, minimum=1),
    # client ID metadata documents (apps.oauth.cimd): a document is at most this many bytes, fetched within this
    # many seconds (connecting, the handshake, and the whole answer each); it is kept as long as its Cache-Control
    # max-age says, within the floor and the ceiling (no max-age, or no-store / no-cache: the floor). Each fetch
    # counts as a registration against the two bounds above.
    "OAUTH_CLIENT_DOCUMENT_MAX_BYTES": _tunable("OAUTH_CLIENT_DOCUMENT_MAX_BYTES", 5120, minimum=512, maximum=65_536),
    "OAUTH_CLIENT_DOCUMENT_TIMEOUT_SECONDS": _tunable(
        "OAUTH_CLIENT_DOCUMENT_TIMEOUT_SECONDS", 5, minimum=1, maximum=30
    ),
    "OAUTH_CLIENT_DOCUMENT_CACHE_MIN_SECONDS": _tunable(
        "OAUTH_CLIENT_DOCUMENT_CACHE_MIN_SECONDS", 300, minimum=0, maximum=86_400
    ),
    "OAUTH_CLIENT_DOCUMENT_CACHE_MAX_SECONDS": _tunable(
        "OAUTH_CLIENT_DOCUMENT_CACHE_MAX_SECONDS", 86_400, minimum=60, maximum=7 * 86_400
    ),
    # requests one agent credential (API key or connection) may make to /mcp per minute
    "MCP_REQUESTS_PER_MINUTE": _tunable("MCP_REQUESTS_PER_MINUTE", 600, minimum=1),
    # how long the requestState of an MCP input_required answer (URL elicitation) may come back with the repeat
    "MCP_REQUEST_STATE_TTL_SECONDS": _tunable("MCP_REQUEST_STATE_TTL_SECONDS", 600, minimum=10, maximum=86400),
    # IMAP sync: messages fetched and stored per batch (one transaction each), seconds a mail server may
    # take to answer, and the backoff of a failing account (doubling from the base, capped)
    "SYNC_BATCH_SIZE": _tunable("SYNC_BATCH_SIZE", 200, minimum=1, maximum=5000),
    # ... and at most this many bytes of mail per batch (a larger message is a batch of its own): with the
    # batch being stored and the next one read ahead, a sync holds about three batches of mail at a time
    "SYNC_BATCH_MAX_BYTES": _tunable("SYNC_BATCH_MAX_BYTES", 32 * 1024 * 1024, minimum=1024 * 1024),
    # how often every connected mailbox that is not backing off is synced
    "SYNC_INTERVAL_SECONDS": _tunable("SYNC_INTERVAL_SECONDS", 60, minimum=10),
    "MAIL_SERVER_TIMEOUT_SECONDS": _tunable("MAIL_SERVER_TIMEOUT_SECONDS", 30, minimum=1, maximum=600),
    "SYNC_BACKOFF_BASE_SECONDS": _tunable("SYNC_BACKOFF_BASE_SECONDS", 60, minimum=1),
    "SYNC_BACKOFF_MAX_SECONDS": _tunable("SYNC_BACKOFF_MAX_SECONDS", 3600, minimum=1),
    # a message the server no longer has (deleted there) is removed from Oaken when a complete sync still
    # cannot find it this long after it went missing (a move by another client is found well within it);
    # flags changed in Oaken whose push has not reached the server after this long are pushed again
    "SYNC_MISSING_GRACE_SECONDS": _tunable("SYNC_MISSING_GRACE_SECONDS", 3600, minimum=0),
    "SYNC_FLAGS_REPUSH_SECONDS": _tunable("SYNC_FLAGS_REPUSH_SECONDS", 900, minimum=60),
    # the IMAP IDLE watcher (apps.mail.watcher, `oaken watch-mail`): IDLE is issued again this often (servers may
    # drop an idle connection after 30 minutes, RFC 2177), a watcher's hold on an account (a lease in Redis)
    # lapses this long after its last renewal (a dead watcher's accounts are free again then), accounts are
    # looked for (added, removed, leases free) this often, one watcher holds at most this many accounts, and a
    # connection that failed is tried again after a doubling wait up to this cap
    "WATCH_REIDLE_SECONDS": _tunable("WATCH_REIDLE_SECONDS", 1500, minimum=5, maximum=1740),
    "WATCH_LEASE_TTL_SECONDS": _tunable("WATCH_LEASE_TTL_SECONDS", 30, minimum=2, maximum=600),
    "WATCH_SCAN_SECONDS": _tunable("WATCH_SCAN_SECONDS", 15, minimum=1, maximum=3600),
    "WATCH_ACCOUNTS_MAX": _tunable("WATCH_ACCOUNTS_MAX", 5000, minimum=1, maximum=100_000),
    "WATCH_BACKOFF_MAX_SECONDS": _tunable("WATCH_BACKOFF_MAX_SECONDS", 600, minimum=1, maximum=86_400),
    # idempotency keys are kept at least this long
    "IDEMPOTENCY_RETENTION_HOURS": _tunable("IDEMPOTENCY_RETENTION_HOURS", 48, minimum=24),
    # outbound mail (SPEC §10): recipients per e-mail (to + cc + bcc, de-duplicated), recipients an hour per
    # connection or API key (a person's own sends count per person), SMTP timeout, and when the outbox
    # sweeper hands a queued request to a worker again or gives up waiting on a claimed one
    "SEND_RECIPIENTS_MAX": _tunable("SEND_RECIPIENTS_MAX", 50, minimum=1),
    "SEND_RECIPIENTS_PER_HOUR": _tunable("SEND_RECIPIENTS_PER_HOUR", 200, minimum=1),
    "SEND_BODY_MAX_CHARS": _tunable("SEND_BODY_MAX_CHARS", 500_000, minimum=1000),
    # what a mailbox sends by itself (automatic replies): at most this many an hour, whatever mail arrives; the
    # rest wait in `queued` for the next hour, in order (its approver's own hourly budget counts them too)
    "AUTO_SENDS_PER_HOUR": _tunable("AUTO_SENDS_PER_HOUR", 50, minimum=1, maximum=10_000),
    # the reason a person may give when rejecting a request (reject_outbound), read back by the agent
    "REJECT_REASON_MAX_CHARS": _tunable("REJECT_REASON_MAX_CHARS", 1000, minimum=1, maximum=10_000),
    # provenance (SPEC §23): how long what an agent credential read is remembered, how long a stretch of a
    # request's text must be, copied from mail it read, to count as taken from it, how many of its newest reads
    # are kept (older ones are forgotten first), and whether a send policy may approve a first contact made
    # after reading a stranger's mail (0: never, a person decides; 1: the policies decide)
    "PROVENANCE_WINDOW_HOURS": _tunable("PROVENANCE_WINDOW_HOURS", 24, minimum=1, maximum=24 * 30),
    "PROVENANCE_SPAN_CHARS": _tunable("PROVENANCE_SPAN_CHARS", 40, minimum=8, maximum=10_000),
    "PROVENANCE_READS_MAX": _tunable("PROVENANCE_READS_MAX", 2000, minimum=10, maximum=100_000),
    "PROVENANCE_POLICY_FIRST_CONTACT": _tunable("PROVENANCE_POLICY_FIRST_CONTACT", 0, minimum=0, maximum=1),
    "SMTP_TIMEOUT_SECONDS": _tunable("SMTP_TIMEOUT_SECONDS", 30, minimum=1),
    # one-click unsubscribe: the list's POST (connect, TLS, answer) and the DKIM key's DNS lookup, each at most
    "UNSUBSCRIBE_TIMEOUT_SECONDS": _tunable("UNSUBSCRIBE_TIMEOUT_SECONDS", 10, minimum=1, maximum=60),
    "OUTBOX_REQUEUE_SECONDS": _tunable("OUTBOX_REQUEUE_SECONDS", 300, minimum=10),
    "SENDING_STALE_SECONDS": _tunable("SENDING_STALE_SECONDS", 900, minimum=60),
    # a delivery that certainly sent nothing (no connection, a 4xx before DATA) is tried again, at most this many
    # attempts in all, waiting the base doubling per attempt up to the cap; nothing is retried once DATA began
    "SEND_ATTEMPTS_MAX": _tunable("SEND_ATTEMPTS_MAX", 5, minimum=1, maximum=50),
    "SEND_RETRY_BASE_SECONDS": _tunable("SEND_RETRY_BASE_SECONDS", 60, minimum=1),
    "SEND_RETRY_MAX_SECONDS": _tunable("SEND_RETRY_MAX_SECONDS", 3600, minimum=1),
    # send budgets rolled up from Redis into PostgreSQL for the console (apps.outbound.rollup): how often, the
    # counters one run reads at most (the next run goes on where it stopped), how long hourly figures are kept
    "BUDGET_ROLLUP_SECONDS": _tunable("BUDGET_ROLLUP_SECONDS", 60, minimum=5, maximum=600),
    "BUDGET_ROLLUP_MAX_KEYS": _tunable("BUDGET_ROLLUP_MAX_KEYS", 10_000, minimum=1),
    "BUDGET_HISTORY_HOURS": _tunable("BUDGET_HISTORY_HOURS", 48, minimum=25),
    # attachments of one outgoing e-mail (send_email's files, a draft's files): how many, bytes per file, bytes
    # in all; more is refused with LIMIT_EXCEEDED, never cut
    "SEND_ATTACHMENTS_MAX": _tunable("SEND_ATTACHMENTS_MAX", 20, minimum=0, maximum=100),
    "SEND_ATTACHMENT_MAX_BYTES": _tunable("SEND_ATTACHMENT_MAX_BYTES", 10 << 20, minimum=1),
    "SEND_ATTACHMENTS_TOTAL_MAX_BYTES": _tunable("SEND_ATTACHMENTS_TOTAL_MAX_BYTES", 20 << 20, minimum=1),
    # an account's signature (set_signature): at most this many characters, never more than a mail field holds
    # (an agent reads it as MailText, which would cut it)
    "SIGNATURE_MAX_CHARS": _tunable("SIGNATURE_MAX_CHARS", 1000, minimum=1, maximum=100_000),
    # a person's name and a mailbox's sender name (the From header's display name): at most this many characters,
    # never more than an outbound request's column holds
    "SENDER_NAME_MAX_CHARS": _tunable("SENDER_NAME_MAX_CHARS", 100, minimum=1, maximum=200),
    # saved views (apps.search.saved): how many one person keeps in a tenant, and where list_views stops counting
    # a view's messages (each count reads at most this many rows plus one, so listing every view costs at most
    # VIEWS_MAX of them; past it the count says "more")
    "VIEWS_MAX": _tunable("VIEWS_MAX", 50, minimum=1, maximum=500),
    "VIEW_COUNT_MAX": _tunable("VIEW_COUNT_MAX", 999, minimum=1, maximum=100_000),
    # snippets (apps.outbound.snippets): how many one person keeps in a tenant, and the characters of one (never
    # more than a draft's body holds)
    "SNIPPETS_MAX": _tunable("SNIPPETS_MAX", 100, minimum=1, maximum=1000),
    "SNIPPET_MAX_CHARS": _tunable("SNIPPET_MAX_CHARS", 5000, minimum=1, maximum=100_000),
    # rules (apps.rules): how many one workspace keeps; how many messages test_rule and apply_rule read at most
    # (the newest of the period asked for: past it the answer says it stopped), how many days back they look; how
    # long new mail waits for its embedding when an "about" condition covers it (after that it does not hold)
    "RULES_MAX": _tunable("RULES_MAX", 100, minimum=1, maximum=1000),
    "RULE_SCAN_MAX": _tunable("RULE_SCAN_MAX", 5000, minimum=1, maximum=100_000),
    "RULE_DAYS_MAX": _tunable("RULE_DAYS_MAX", 365, minimum=1, maximum=3650),
    "RULES_EMBEDDING_WAIT_SECONDS": _tunable("RULES_EMBEDDING_WAIT_SECONDS", 600, minimum=0, maximum=86400),
    # the event feed (apps.events): how many days an event is kept (a cursor older than that is CURSOR_EXPIRED),
    # and how many one list_events page holds at most
    "EVENTS_RETENTION_DAYS": _tunable("EVENTS_RETENTION_DAYS", 30, minimum=1, maximum=3650),
    "EVENTS_PAGE_MAX": _tunable("EVENTS_PAGE_MAX", 500, minimum=1, maximum=10_000),
    # wait_for_message: how long a call waits when it does not say, and at most (apps.gate.waiting)
    "WAIT_DEFAULT_SECONDS": _tunable("WAIT_DEFAULT_SECONDS", 30, minimum=1, maximum=120),
    "WAIT_MAX_SECONDS": _tunable("WAIT_MAX_SECONDS", 120, minimum=1, maximum=600),
    # how many days before an API key's or an OAuth connection's deadline the feed says `connection.expiring`
    # (once per credential and deadline; apps.agents.services.notice_expiring, the beat's agents.notice_expiring)
    "CREDENTIAL_EXPIRING_DAYS": _tunable("CREDENTIAL_EXPIRING_DAYS", 7, minimum=1, maximum=365),
    # webhooks (apps.webhooks): how many one person keeps in a tenant; one delivery's POST (connect, TLS, the whole
    # answer) at most this long; a failed delivery is tried again after the base doubling per attempt up to the
    # cap, with jitter, and an endpoint failing this many hours without a success is disabled; a rotated secret
    # still signs (beside the new one) this many hours; deliveries one claim of an endpoint sends at most
    "WEBHOOKS_MAX": _tunable("WEBHOOKS_MAX", 20, minimum=1, maximum=1000),
    "WEBHOOK_TIMEOUT_SECONDS": _tunable("WEBHOOK_TIMEOUT_SECONDS", 10, minimum=1, maximum=60),
    "WEBHOOK_RETRY_BASE_SECONDS": _tunable("WEBHOOK_RETRY_BASE_SECONDS", 10, minimum=1, maximum=3600),
    "WEBHOOK_RETRY_MAX_SECONDS": _tunable("WEBHOOK_RETRY_MAX_SECONDS", 3600, minimum=1, maximum=86_400),
    "WEBHOOK_FAILING_HOURS": _tunable("WEBHOOK_FAILING_HOURS", 24, minimum=1, maximum=720),
    "WEBHOOK_SECRET_GRACE_HOURS": _tunable("WEBHOOK_SECRET_GRACE_HOURS", 24, minimum=0, maximum=720),
    "WEBHOOK_CLAIM_BATCH": _tunable("WEBHOOK_CLAIM_BATCH", 50, minimum=1, maximum=1000),
    # search (apps.search): reciprocal-rank fusion of the keyword and the vector side (k, and each side's weight
    # in percent), how many candidates each side brings at least, how deep results go, and when a tenant's
    # vector search leaves the exact scan for an HNSW index of its own (apps.search.vectors)
    "SEARCH_RRF_K": _tunable("SEARCH_RRF_K", 60, minimum=1, maximum=1000),
    "SEARCH_KEYWORD_WEIGHT": _tunable("SEARCH_KEYWORD_WEIGHT", 100, minimum=0, maximum=1000),
    "SEARCH_SEMANTIC_WEIGHT": _tunable("SEARCH_SEMANTIC_WEIGHT", 100, minimum=0, maximum=1000),
    "SEARCH_CANDIDATES": _tunable("SEARCH_CANDIDATES", 100, minimum=10, maximum=1000),
    "SEARCH_MAX_RESULTS": _tunable("SEARCH_MAX_RESULTS", 1000, minimum=10, maximum=10_000),
    "SEARCH_EXACT_MAX_CHUNKS": _tunable("SEARCH_EXACT_MAX_CHUNKS", 20_000, minimum=0),
    # a vector hit less similar than this (cosine, percent) is no match: every query has nearest neighbours.
    # With the local model, right answers to paraphrased queries score 0.26-0.41 and strings of made-up words
    # up to 0.45 (bench/search_quality.py): no floor tells them apart; 15 keeps every answer 0 would
    "SEARCH_SEMANTIC_MIN_SIMILARITY": _tunable("SEARCH_SEMANTIC_MIN_SIMILARITY", 15, minimum=0, maximum=100),
    "SEARCH_HNSW_EF_SEARCH": _tunable("SEARCH_HNSW_EF_SEARCH", 100, minimum=10, maximum=1000),
    # the enricher: messages per batch (one transaction, one call to the model), a chunk's characters, chunks
    # of one message at most (the rest of a very long message is not embedded; its words are still found)
    "SEARCH_EMBED_BATCH": _tunable("SEARCH_EMBED_BATCH", 64, minimum=1, maximum=2000),
    "SEARCH_CHUNK_CHARS": _tunable("SEARCH_CHUNK_CHARS", 1200, minimum=100, maximum=20_000),
    "SEARCH_CHUNKS_MAX": _tunable("SEARCH_CHUNKS_MAX", 8, minimum=1, maximum=100),
    # AI labels (apps.search.labelling): the score (percent of cosine) from which a message is labelled, the most
    # hand-labelled (and refused) examples a label compares with, the messages one enricher run decides per label
    "AI_LABEL_MIN_SCORE": _tunable("AI_LABEL_MIN_SCORE", 40, minimum=0, maximum=100),
    "AI_LABEL_EXAMPLES_MAX": _tunable("AI_LABEL_EXAMPLES_MAX", 10, minimum=0, maximum=200),
    "AI_LABEL_BATCH": _tunable("AI_LABEL_BATCH", 200, minimum=1, maximum=5000),
    # plugins (docs/plugins.md): a call's timeout (the plugin's process is killed and replaced past it), the
    # idle processes a plugin keeps per tenant in an Oaken process, how often its health is checked, how many
    # crashes in that time make it unhealthy, and what Oaken hands it and takes back: parts a call, bytes of one
    # part's text, bytes of an answer
    "PLUGIN_TIMEOUT_SECONDS": _tunable("PLUGIN_TIMEOUT_SECONDS", 5, minimum=1, maximum=300),
    "PLUGIN_POOL_SIZE": _tunable("PLUGIN_POOL_SIZE", 2, minimum=1, maximum=32),
    "PLUGIN_HEALTH_SECONDS": _tunable("PLUGIN_HEALTH_SECONDS", 60, minimum=1, maximum=86_400),
    "PLUGIN_CRASHES_MAX": _tunable("PLUGIN_CRASHES_MAX", 3, minimum=1, maximum=100),
    "PLUGIN_MAX_PARTS": _tunable("PLUGIN_MAX_PARTS", 200, minimum=1, maximum=5000),
    "PLUGIN_PART_MAX_BYTES": _tunable("PLUGIN_PART_MAX_BYTES", 256 * 1024, minimum=1024, maximum=16 * 1024 * 1024),
    "PLUGIN_ANSWER_MAX_BYTES": _tunable("PLUGIN_ANSWER_MAX_BYTES", 4 * 1024 * 1024, minimum=1024),
    # a plugin's sandbox (apps.operations.sandbox): its address space, threads, open files, the largest file it
    # writes (and its /tmp), and the CPU seconds one call may use; a call past one is PLUGIN_FAILED and its
    # process is replaced
    "PLUGIN_MEMORY_MAX_MB": _tunable("PLUGIN_MEMORY_MAX_MB", 768, minimum=128, maximum=65_536),
    "PLUGIN_THREADS_MAX": _tunable("PLUGIN_THREADS_MAX", 16, minimum=2, maximum=1024),
    "PLUGIN_FILES_MAX": _tunable("PLUGIN_FILES_MAX", 64, minimum=16, maximum=4096),
    "PLUGIN_FILE_MAX_MB": _tunable("PLUGIN_FILE_MAX_MB", 16, minimum=1, maximum=4096),
    "PLUGIN_CPU_SECONDS": _tunable("PLUGIN_CPU_SECONDS", 5, minimum=1, maximum=3600),
    # the processes of plugins one Oaken process keeps at most (each serves one tenant's calls of one plugin),
    # how long one may stay idle, the calls of one plugin it runs at once (more are refused, not queued: a slow
    # plugin never holds every web thread), and how long a process may take to start and describe its plugin
    "PLUGIN_PROCESSES_MAX": _tunable("PLUGIN_PROCESSES_MAX", 16, minimum=1, maximum=200),
    "PLUGIN_IDLE_SECONDS": _tunable("PLUGIN_IDLE_SECONDS", 300, minimum=1, maximum=86_400),
    "PLUGIN_CALLS_IN_FLIGHT": _tunable("PLUGIN_CALLS_IN_FLIGHT", 2, minimum=1, maximum=64),
    "PLUGIN_START_SECONDS": _tunable("PLUGIN_START_SECONDS", 15, minimum=1, maximum=300),
}

# Pairs (smaller, larger) the start-up check holds in order: a default page within the largest page, a backoff
# or retry that starts within its cap
OPERATIONS_ORDERED = (
    ("PAGE_SIZE_DEFAULT", "PAGE_SIZE_MAX"),
    ("SYNC_BACKOFF_BASE_SECONDS", "SYNC_BACKOFF_MAX_SECONDS"),
    ("SEND_RETRY_BASE_SECONDS", "SEND_RETRY_MAX_SECONDS"),
    ("SEARCH_CANDIDATES", "SEARCH_MAX_RESULTS"),
    ("SIGNATURE_MAX_CHARS", "MAIL_FIELD_MAX_CHARS"),
    ("SNIPPET_MAX_CHARS", "SEND_BODY_MAX_CHARS"),
    ("AWAITING_REPLY_DAYS", "AWAITING_REPLY_DAYS_MAX"),
    # every array an operation takes fits in one array of a call's input, and that in the input
    ("BATCH_MAX", "INPUT_ARRAY_MAX"),
    ("LABELS_PER_CALL_MAX", "INPUT_ARRAY_MAX"),
    ("SUMMARIZE_MAX", "INPUT_ARRAY_MAX"),
    ("SEND_RECIPIENTS_MAX", "INPUT_ARRAY_MAX"),
    ("SEND_ATTACHMENTS_MAX", "INPUT_ARRAY_MAX"),
    ("INPUT_ARRAY_MAX", "INPUT_ITEMS_MAX"),
)

# A body at the operation doors (REST, MCP; apps.gate.payload) must hold the largest e-mail the bounds allow:
# its files in base64 (4 characters per 3 bytes) and its body JSON-escaped (at most 6 characters per
# character), with room for the rest. Every other endpoint keeps Django's DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB).
OPERATION_BODY_MAX_BYTES = (
    (OPERATIONS["SEND_ATTACHMENTS_TOTAL_MAX_BYTES"] + 2) // 3 * 4 + 6 * OPERATIONS["SEND_BODY_MAX_CHARS"] + (1 << 20)
)
