"""Redis (budgets, cache) and Celery (broker, result backend, schedules)."""

from __future__ import annotations

from config.env import env_str
from config.settings.operations import OPERATIONS

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")


def celery_url(url: str) -> str:
    """A Redis URL as kombu spells it (a password in it is kept)."""
    # kombu spells a unix socket redis+socket://, redis-py spells it unix://
    return "redis+socket://" + url.removeprefix("unix://") if url.startswith("unix://") else url


CELERY_BROKER_URL = celery_url(REDIS_URL)
CELERY_RESULT_BACKEND = CELERY_BROKER_URL
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TRACK_STARTED = True
# a result is kept a day for whoever asked for it; the tasks beat runs, and the per-account syncs it queues every
# minute, store none (ignore_result on each task): nobody reads them, and a day of them is 1,440 keys per account
CELERY_RESULT_EXPIRES = 24 * 3600
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "gate-purge-expired": {"task": "gate.purge_expired", "schedule": 3600.0},
    "oauth-forget-unused-clients": {"task": "oauth.forget_unused_clients", "schedule": 3600.0},
    # outbound mail: scheduled sends and retries come from the database (no long ETAs), lost tasks are handed
    # over again, unknown outcomes are looked up in Sent
    "outbound-release-scheduled": {"task": "outbound.release_scheduled", "schedule": 30.0},
    "outbound-sweep-outbox": {"task": "outbound.sweep_outbox", "schedule": 30.0},
    "outbound-reconcile-unknown": {"task": "outbound.reconcile_unknown", "schedule": 300.0},
    # an import whose worker was lost (killed, or its task never arrived) is marked failed, never left waiting
    "mail-sweep-stale-imports": {"task": "mail.sweep_stale_imports", "schedule": 300.0, "options": {"expires": 300.0}},
    "mail-sync-due-accounts": {
        "task": "mail.sync_due_accounts",
        "schedule": float(OPERATIONS["SYNC_INTERVAL_SECONDS"]),
    },
    # snooze: messages whose time has come go back to the inbox (apps.worker.snooze; each once, from the database)
    "mail-return-snoozed": {"task": "mail.return_snoozed", "schedule": 30.0, "options": {"expires": 30.0}},
    # rules: new mail (and apply_rule's) waiting for the rules (apps.worker.rules; each message once per rule version)
    "rules-run": {"task": "rules.run", "schedule": 10.0, "options": {"expires": 10.0}},
    # waiting for reply: threads of persons who turned the nudge on come back to the inbox (apps.worker.awaiting;
    # each once per last message, from the database)
    "mail-nudge-awaiting": {"task": "mail.nudge_awaiting", "schedule": 600.0, "options": {"expires": 600.0}},
    # search: the enricher embeds what new mail and edits left waiting (a no-op query when nothing waits)
    "search-enrich": {"task": "search.enrich", "schedule": 10.0, "options": {"expires": 10.0}},
    # AI labels: labels with a description decide the new mail the enricher embedded (apps.worker.ailabels)
    "mail-ai-labels": {"task": "mail.ai_labels", "schedule": 15.0, "options": {"expires": 15.0}},
    # automatic replies: new mail of mailboxes with one on (apps.worker.autoreplies; each message once)
    "outbound-auto-replies": {"task": "outbound.auto_replies", "schedule": 15.0, "options": {"expires": 15.0}},
    # the event feed: events older than EVENTS_RETENTION_DAYS go (apps.events.feed.prune)
    "events-prune": {"task": "events.prune", "schedule": 3600.0, "options": {"expires": 3600.0}},
    # keys and connections whose deadline comes within CREDENTIAL_EXPIRING_DAYS: connection.expiring, once each
    # (apps.agents.services.notice_expiring)
    "agents-notice-expiring": {"task": "agents.notice_expiring", "schedule": 3600.0, "options": {"expires": 3600.0}},
    # webhooks: the feed's events to each due endpoint, in order, retried with backoff (apps.webhooks.delivery; a
    # claim per endpoint, so copies running at once never send to one endpoint together)
    "webhooks-deliver": {"task": "webhooks.deliver", "schedule": 5.0, "options": {"expires": 5.0}},
    # summaries: new mail of opted-in accounts (a no-op unless OAKEN_SUMMARIZE_NEW_MAIL is on)
    "summaries-new-mail": {"task": "summaries.summarize_new_mail", "schedule": 60.0, "options": {"expires": 60.0}},
    # hourly send budgets, Redis → PostgreSQL for the console; a copy waiting longer than a period is dropped
    "outbound-roll-up-budgets": {
        "task": "outbound.roll_up_budgets",
        "schedule": float(OPERATIONS["BUDGET_ROLLUP_SECONDS"]),
        "options": {"expires": OPERATIONS["BUDGET_ROLLUP_SECONDS"]},
    },
}
