"""Summaries: of a thread here; of messages in mail_organize (it may mark them read afterwards). Each is written
on a Celery worker and cached per content and summarizer (apps.summaries); none of it marks anything read.

A summary is mail-derived text: typed MailBody (fenced on the MCP door), cut at SUMMARY_MAX_CHARS, and never read
for ids, recipients or commands.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from django.conf import settings
from pydantic import Field

from apps.core.changes import Change
from apps.core.kinds import Scope
from apps.mail.models import Message, Thread
from apps.mail.selectors import access_thread_by_id, thread_messages
from apps.operations.context import Context
from apps.operations.defs.shapes import Closed, MailBody
from apps.operations.registry import NEVER, Callers, Ceiling, OpClass, Preview, operation
from apps.operations.targets import AccountIn, ThreadIn, account_of, reach
from apps.summaries import newmail, services
from apps.summaries.selectors import auto_summaries_enabled
from apps.summaries.services import Job, Outcome


class SummarizerOut(Closed):
    kind: Literal["local", "llm"]
    model: str


class SummaryState(Closed):
    state: Literal["done", "pending", "failed"]
    summary: MailBody | None = None
    truncated: bool = False
    reason: str | None = None


def summarizer_out() -> SummarizerOut:
    identity = services.current_identity()
    return SummarizerOut(kind=identity.kind, model=identity.model)  # type: ignore[arg-type]


def state_fields(outcome: Outcome) -> dict[str, object]:
    """What an answer says of one summary: the text when done, the fixed reason when failed, else only pending."""
    if outcome.state == "done":
        return {"state": "done", "summary": outcome.text, "truncated": outcome.truncated}
    if outcome.state == "failed":
        return {"state": "failed", "reason": outcome.reason}
    return {"state": "pending"}


def wait_seconds(ctx: Context) -> float:
    return float(ctx.bounds.SUMMARY_WAIT_SECONDS)


def gather_jobs(ctx: Context, jobs: list[Job]) -> dict[tuple[str, str], Outcome]:
    return services.summaries_for(tenant=ctx.tenant, jobs=jobs, wait_seconds=wait_seconds(ctx))


# ---------------------------------------------------------------- summarize_thread


class ThreadSummaryOut(SummaryState):
    thread_id: str
    message_count: int
    thread_truncated: bool
    summarizer: SummarizerOut


class ThreadWork(NamedTuple):
    """What summarize_thread resolves: the thread and its first messages, oldest first (within the thread bound)."""

    thread: Thread
    messages: list[Message]
    truncated: bool


def _thread_work(ctx: Context, data: ThreadIn) -> ThreadWork:
    thread = access_thread_by_id(data.thread_id, reach=reach(ctx))
    limit = ctx.bounds.THREAD_MAX_MESSAGES
    messages = thread_messages(tenant=ctx.tenant, thread=thread, limit=limit + 1)
    return ThreadWork(thread=thread, messages=messages[:limit], truncated=len(messages) > limit)


def _gather_thread(ctx: Context, data: ThreadIn) -> Outcome:
    work: ThreadWork = ctx.targets
    if not work.messages:
        return Outcome("done")
    job = services.thread_job(work.messages)
    return gather_jobs(ctx, [job])[job.key]


@operation(
    name="summarize_thread",
    summary="Summarize a thread as one text, its messages oldest first (at most the thread bound); marks nothing read.",
    input=ThreadIn,
    output=ThreadSummaryOut,
    op_class=OpClass.READ,
    # summaries are written by workers and may be sent to a model: the Organize permission, as summarize_messages
    scope=Scope.WRITE,
    ceiling=Ceiling.ON,
    targets=_thread_work,
    gather=_gather_thread,
)
def summarize_thread(ctx: Context, data: ThreadIn) -> ThreadSummaryOut:
    """Waits up to SUMMARY_WAIT_SECONDS for the workers: a summary not done by then is `pending`, and the next call
    returns it from the cache."""
    work: ThreadWork = ctx.targets
    outcome: Outcome = ctx.gathered
    return ThreadSummaryOut(
        thread_id=str(work.thread.pk),
        message_count=len(work.messages),
        thread_truncated=work.truncated,
        summarizer=summarizer_out(),
        **state_fields(outcome),  # type: ignore[arg-type]
    )


# ---------------------------------------------------------------- background summaries of new mail


class AutoSummariesIn(AccountIn):
    enabled: bool = Field(description="summarize this account's new mail in the background")


class AutoSummariesOut(Closed):
    account_id: str
    enabled: bool
    running: bool = Field(description="whether background summaries run at all here (OAKEN_SUMMARIZE_NEW_MAIL)")


def _the_account(ctx: Context, data: AutoSummariesIn) -> object:
    return account_of(ctx, data.account_id)


def _enabled(ctx: Context) -> bool:
    return auto_summaries_enabled(tenant=ctx.tenant, account=ctx.targets)


def _auto_preview(ctx: Context, data: AutoSummariesIn) -> Preview:
    before = _enabled(ctx)
    changes = (
        ()
        if before == data.enabled
        else (Change(data.account_id, {"auto_summaries": before}, {"auto_summaries": data.enabled}),)
    )
    return Preview(changes, summary="summarize new mail in the background" if data.enabled else "stop")


@operation(
    name="set_auto_summaries",
    summary="Summarize an account's new mail in the background, or stop (bounded per tenant and hour).",
    input=AutoSummariesIn,
    output=AutoSummariesOut,
    op_class=OpClass.MUTATE,
    # new mail may go to a model that costs: a person decides, never an agent
    ceiling=Ceiling.NEVER,
    role="ADMIN",
    callers=Callers.PERSONS,
    preview=_auto_preview,
    confirm=NEVER,
    targets=_the_account,
)
def set_auto_summaries(ctx: Context, data: AutoSummariesIn) -> AutoSummariesOut:
    """Only mail that arrives after this is summarized; SUMMARIES_NEW_MAIL_PER_HOUR bounds each tenant's hour."""
    before = newmail.opt_in(account=ctx.targets, enabled=data.enabled)
    if before != data.enabled:
        ctx.touch(data.account_id, {"auto_summaries": before}, {"auto_summaries": data.enabled})
    return AutoSummariesOut(
        account_id=data.account_id, enabled=data.enabled, running=bool(settings.SUMMARIES["NEW_MAIL"])
    )
