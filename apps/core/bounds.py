"""The bounds (SPEC §11) as typed attributes: `bounds.PAGE_SIZE_MAX`, never `settings.OPERATIONS["PAGE_SIZE_MAX"]`.

Each bound is declared here once more by name, so a misspelt one is a type error (mypy) and an AttributeError,
never a KeyError at the first call that meets it; a start-up check (apps.operations.checks, oaken.E008) fails
when this list and the OPERATIONS block in config/settings/operations.py (defaults, ranges, what each means)
differ. A value is read from the settings at each use, so `override_settings` and a test that replaces the
block see their own values, as django-oauth-toolkit's settings object does.
"""

from __future__ import annotations

from typing import overload

from django.conf import settings


class Bound:
    """One bound: reads settings.OPERATIONS[its name] when asked."""

    name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type) -> Bound: ...
    @overload
    def __get__(self, instance: Bounds, owner: type) -> int: ...
    def __get__(self, instance: Bounds | None, owner: type) -> int | Bound:
        if instance is None:
            return self
        return int(settings.OPERATIONS[self.name])


class Bounds:
    """Every bound of the OPERATIONS block; `bounds[name]` for a name held in data (an operation's Bound)."""

    IMPORT_BATCH_SIZE = Bound()
    IMPORT_MAX_MESSAGE_BYTES = Bound()
    IMPORT_UPLOAD_MAX_BYTES = Bound()
    IMPORT_STALE_SECONDS = Bound()
    THREAD_SUBJECT_WINDOW_DAYS = Bound()
    ATTACHMENT_TEXT_MAX_CHARS = Bound()
    PAGE_SIZE_DEFAULT = Bound()
    PAGE_SIZE_MAX = Bound()
    AUDIT_EXPORT_PAGE_MAX = Bound()
    AUDIT_FOLD_SCAN_MAX = Bound()
    BATCH_MAX = Bound()
    LABELS_PER_CALL_MAX = Bound()
    SUMMARIZE_MAX = Bound()
    THREAD_MAX_MESSAGES = Bound()
    INPUT_ARRAY_MAX = Bound()
    INPUT_ITEMS_MAX = Bound()
    MESSAGE_ATTACHMENTS_MAX = Bound()
    TEXT_MAX_CHARS = Bound()
    SUMMARY_MAX_CHARS = Bound()
    SUMMARY_WAIT_SECONDS = Bound()
    SUMMARY_PENDING_MAX_SECONDS = Bound()
    SUMMARIES_NEW_MAIL_PER_HOUR = Bound()
    MAIL_FIELD_MAX_CHARS = Bound()
    QUERY_MAX_CHARS = Bound()
    HTML_MAX_CHARS = Bound()
    RAW_MESSAGE_MAX_BYTES = Bound()
    CONFIRM_FREE_MAX = Bound()
    SNOOZE_MAX_DAYS = Bound()
    AWAITING_REPLY_DAYS = Bound()
    AWAITING_REPLY_DAYS_MAX = Bound()
    AWAITING_REPLY_WINDOW_DAYS = Bound()
    CONFIRMATION_TTL_SECONDS = Bound()
    CONFIRMATION_TOKENS_PER_CALLER = Bound()
    WORKSPACES_MAX = Bound()
    TOOL_SETS_MAX = Bound()
    INVITATIONS_OPEN_MAX = Bound()
    INVITATION_TTL_DAYS = Bound()
    INVITATION_REFERENCE_TTL_SECONDS = Bound()
    INVITATION_PAGE_PER_CLIENT = Bound()
    INVITATION_PAGE_WINDOW_SECONDS = Bound()
    SIGN_IN_MAX_FAILURES = Bound()
    SIGN_IN_WINDOW_SECONDS = Bound()
    SIGN_IN_ADDRESS_CEILING = Bound()
    SIGN_IN_SLOW_SECONDS = Bound()
    ACCOUNT_MAIL_PER_ADDRESS = Bound()
    ACCOUNT_MAIL_PER_CLIENT = Bound()
    ACCOUNT_MAIL_WINDOW_SECONDS = Bound()
    OAUTH_REGISTRATIONS_PER_HOUR = Bound()
    OAUTH_REGISTRATIONS_ALL_PER_HOUR = Bound()
    OAUTH_CLIENT_DOCUMENT_MAX_BYTES = Bound()
    OAUTH_CLIENT_DOCUMENT_TIMEOUT_SECONDS = Bound()
    OAUTH_CLIENT_DOCUMENT_CACHE_MIN_SECONDS = Bound()
    OAUTH_CLIENT_DOCUMENT_CACHE_MAX_SECONDS = Bound()
    MCP_REQUESTS_PER_MINUTE = Bound()
    MCP_REQUEST_STATE_TTL_SECONDS = Bound()
    SYNC_BATCH_SIZE = Bound()
    SYNC_BATCH_MAX_BYTES = Bound()
    SYNC_INTERVAL_SECONDS = Bound()
    MAIL_SERVER_TIMEOUT_SECONDS = Bound()
    SYNC_BACKOFF_BASE_SECONDS = Bound()
    SYNC_BACKOFF_MAX_SECONDS = Bound()
    SYNC_MISSING_GRACE_SECONDS = Bound()
    SYNC_FLAGS_REPUSH_SECONDS = Bound()
    WATCH_REIDLE_SECONDS = Bound()
    WATCH_LEASE_TTL_SECONDS = Bound()
    WATCH_SCAN_SECONDS = Bound()
    WATCH_ACCOUNTS_MAX = Bound()
    WATCH_BACKOFF_MAX_SECONDS = Bound()
    IDEMPOTENCY_RETENTION_HOURS = Bound()
    SEND_RECIPIENTS_MAX = Bound()
    SEND_RECIPIENTS_PER_HOUR = Bound()
    PROVENANCE_WINDOW_HOURS = Bound()
    PROVENANCE_SPAN_CHARS = Bound()
    PROVENANCE_READS_MAX = Bound()
    PROVENANCE_POLICY_FIRST_CONTACT = Bound()
    SEND_BODY_MAX_CHARS = Bound()
    AUTO_SENDS_PER_HOUR = Bound()
    REJECT_REASON_MAX_CHARS = Bound()
    SMTP_TIMEOUT_SECONDS = Bound()
    UNSUBSCRIBE_TIMEOUT_SECONDS = Bound()
    OUTBOX_REQUEUE_SECONDS = Bound()
    SENDING_STALE_SECONDS = Bound()
    SEND_ATTEMPTS_MAX = Bound()
    SEND_RETRY_BASE_SECONDS = Bound()
    SEND_RETRY_MAX_SECONDS = Bound()
    BUDGET_ROLLUP_SECONDS = Bound()
    BUDGET_ROLLUP_MAX_KEYS = Bound()
    BUDGET_HISTORY_HOURS = Bound()
    SEND_ATTACHMENTS_MAX = Bound()
    SEND_ATTACHMENT_MAX_BYTES = Bound()
    SEND_ATTACHMENTS_TOTAL_MAX_BYTES = Bound()
    SIGNATURE_MAX_CHARS = Bound()
    SENDER_NAME_MAX_CHARS = Bound()
    VIEWS_MAX = Bound()
    VIEW_COUNT_MAX = Bound()
    SNIPPETS_MAX = Bound()
    SNIPPET_MAX_CHARS = Bound()
    RULES_MAX = Bound()
    RULE_SCAN_MAX = Bound()
    RULE_DAYS_MAX = Bound()
    RULES_EMBEDDING_WAIT_SECONDS = Bound()
    EVENTS_RETENTION_DAYS = Bound()
    EVENTS_PAGE_MAX = Bound()
    WAIT_DEFAULT_SECONDS = Bound()
    WAIT_MAX_SECONDS = Bound()
    CREDENTIAL_EXPIRING_DAYS = Bound()
    WEBHOOKS_MAX = Bound()
    WEBHOOK_TIMEOUT_SECONDS = Bound()
    WEBHOOK_RETRY_BASE_SECONDS = Bound()
    WEBHOOK_RETRY_MAX_SECONDS = Bound()
    WEBHOOK_FAILING_HOURS = Bound()
    WEBHOOK_SECRET_GRACE_HOURS = Bound()
    WEBHOOK_CLAIM_BATCH = Bound()
    SEARCH_RRF_K = Bound()
    SEARCH_KEYWORD_WEIGHT = Bound()
    SEARCH_SEMANTIC_WEIGHT = Bound()
    SEARCH_CANDIDATES = Bound()
    SEARCH_MAX_RESULTS = Bound()
    SEARCH_EXACT_MAX_CHUNKS = Bound()
    SEARCH_SEMANTIC_MIN_SIMILARITY = Bound()
    SEARCH_HNSW_EF_SEARCH = Bound()
    SEARCH_EMBED_BATCH = Bound()
    AI_LABEL_MIN_SCORE = Bound()
    AI_LABEL_EXAMPLES_MAX = Bound()
    AI_LABEL_BATCH = Bound()
    SEARCH_CHUNK_CHARS = Bound()
    SEARCH_CHUNKS_MAX = Bound()
    PLUGIN_TIMEOUT_SECONDS = Bound()
    PLUGIN_POOL_SIZE = Bound()
    PLUGIN_HEALTH_SECONDS = Bound()
    PLUGIN_CRASHES_MAX = Bound()
    PLUGIN_MAX_PARTS = Bound()
    PLUGIN_PART_MAX_BYTES = Bound()
    PLUGIN_ANSWER_MAX_BYTES = Bound()
    PLUGIN_MEMORY_MAX_MB = Bound()
    PLUGIN_THREADS_MAX = Bound()
    PLUGIN_FILES_MAX = Bound()
    PLUGIN_FILE_MAX_MB = Bound()
    PLUGIN_CPU_SECONDS = Bound()
    PLUGIN_PROCESSES_MAX = Bound()
    PLUGIN_IDLE_SECONDS = Bound()
    PLUGIN_CALLS_IN_FLIGHT = Bound()
    PLUGIN_START_SECONDS = Bound()

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(name for name, value in vars(cls).items() if isinstance(value, Bound))

    def __getitem__(self, name: str) -> int:
        if name not in self.names():
            raise KeyError(name)
        return int(settings.OPERATIONS[name])


bounds = Bounds()
