"""The feed's `budget.exhausted` (as migration 0002's writers): an hourly send budget found spent.

Written by the insert of an outbound_budgetexhaustion row, which the first refusal of a budget's clock hour makes with
the refusal's own audit event (apps.outbound.requests; the row is kept once per budget and hour, so a later refusal
inserts nothing and reports nothing). A persons' event (apps.events.feed.PERSONS_ONLY): ids and fixed words only.
"""

from django.db import migrations

from apps.events.migrations._triggers import UUID_PATTERN, trigger, utc

# the mailbox the refused request was for gives the workspace; the budget's credential (or person) is the subject
BUDGET_EXHAUSTED = trigger(
    "events_budget_exhausted",
    "outbound_budgetexhaustion",
    "INSERT",
    "NEW TABLE AS n",
    f"""SELECT n.tenant_id, 'budget.exhausted' AS type, acc.workspace_id, n.account_id,
               CASE WHEN n.budget_id ~* {UUID_PATTERN} THEN n.budget_id::uuid END AS subject_id,
               jsonb_build_object('budget', n.kind,
                                  CASE WHEN n.kind = 'person' THEN 'person_id' ELSE 'credential_id' END, n.budget_id,
                                  'limit', n.per_hour, 'until', {utc("n.window_start + interval '1 hour'")}) AS data,
               n.id AS k
        FROM n LEFT JOIN mail_mailaccount acc ON acc.id = n.account_id""",  # noqa: S608 (fixed words)
)


class Migration(migrations.Migration):
    dependencies = [
        ("events", "0002_triggers"),
        ("outbound", "0011_budget_exhaustion"),
    ]

    operations = [migrations.RunSQL(*BUDGET_EXHAUSTED)]
