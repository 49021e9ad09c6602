"""Every tunable bound, in one place (SPEC §11)."""

from __future__ import annotations

from config.env import env_int

OPERATIONS = {
    # import
    "IMPORT_BATCH_SIZE": env_int("OAKEN_IMPORT_BATCH_SIZE", 500, minimum=1, maximum=5000),
    "IMPORT_MAX_MESSAGE_BYTES": env_int("OAKEN_IMPORT_MAX_MESSAGE_BYTES", 50 * 1024 * 1024, minimum=1024),
    # threading: a reply-prefixed subject joins an earlier thread with the same subject this recent
    "THREAD_SUBJECT_WINDOW_DAYS": env_int("OAKEN_THREAD_SUBJECT_WINDOW_DAYS", 60, minimum=0),
    # text kept for search from a text attachment
    "ATTACHMENT_TEXT_MAX_CHARS": env_int("OAKEN_ATTACHMENT_TEXT_MAX_CHARS", 200_000, minimum=0),
}
