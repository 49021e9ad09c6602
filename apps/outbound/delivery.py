"""Delivering an approved request over SMTP exactly once, and reconciling an unknown outcome over IMAP.

The protocol (SPEC §10, "Reliability facts"):
1. claim: approved/queued (and due) → sending, a guarded UPDATE committed before anything else, so of
   any number of workers handed the same request only one goes on;
2. MAIL FROM and RCPT TO; a refusal or a lost connection here is certain: → failed;
3. mark DATA as begun (guarded on the claim still holding) and commit, then DATA;
4. 250 → sent; a definite refusal → failed; a lost connection or timeout once DATA began → unknown, and
   never an automatic resend: reconciliation looks for the request's own Message-ID in the Sent folder;
5. the sent copy is appended to the account's Sent folder unless the server already put it there.
Servers' replies are never stored or logged (they can quote the message): only fixed reason codes.
"""

from __future__ import annotations

import logging
import smtplib
import ssl
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from imapclient import IMAPClient
from imapclient.imapclient import SENT

from apps.mail.imap import MailServerError, open_imap, require_public_host
from apps.outbound.compose import build_mime
from apps.outbound.models import OutboundRequest, OutboxEntry, State
from apps.outbound.requests import audit_task_transition, enqueue_on_commit, stored_digest, transition

log = logging.getLogger("oaken.outbound")

_SENT_NAMES = ("Sent", "Sent Items", "Sent Messages", "INBOX.Sent", "INBOX/Sent")


@dataclass
class Outcome:
    state: State
    error: str = ""
    refused: list[str] = field(default_factory=list)


def _credentials(account: Any, kind: str) -> dict[str, Any] | None:
    """The account's "imap" or "smtp" settings (decrypted in memory only, never logged)."""
    stored = account.credentials
    value = stored.get(kind) if isinstance(stored, dict) else None
    return value if isinstance(value, dict) else None


def _finish(request: OutboundRequest, outcome: Outcome, operation: str = "deliver_outbound") -> bool:
    now = timezone.now()
    with transaction.atomic():
        before = transition(
            request.tenant, request.pk, State.SENDING, outcome.state, error=outcome.error,
            refused_recipients=outcome.refused, finished_at=now if outcome.state != State.UNKNOWN else None,
        )  # fmt: skip
        if before is None:
            log.error("outbound request %s left 'sending' while being delivered", request.pk)
            return False
        extra = {"error": outcome.error} if outcome.error else {}
        audit_task_transition(request.tenant, operation, request.pk, before, outcome.state, **extra)
    return True


def _claim(request: OutboundRequest) -> bool:
    now = timezone.now()
    with transaction.atomic():
        rows = OutboundRequest.objects.for_tenant(request.tenant).filter(pk=request.pk)
        # queued means due (released by the schedule, or never scheduled); an approved one only once its time came
        due = {State.QUEUED: rows, State.APPROVED: rows.filter(Q(send_at__isnull=True) | Q(send_at__lte=now))}
        for state, candidates in due.items():
            if candidates.filter(state=state).update(state=State.SENDING, smtp_started_at=None, updated_at=now) == 1:
                audit_task_transition(request.tenant, "deliver_outbound", request.pk, state, State.SENDING)
                return True
    return False


def _data_may_begin(request: OutboundRequest) -> bool:
    """Record, before DATA, that DATA began (guarded: a sweeper that took the claim back wins instead)."""
    with transaction.atomic():
        return (
            OutboundRequest.objects.for_tenant(request.tenant)
            .filter(pk=request.pk, state=State.SENDING, smtp_started_at__isnull=True)
            .update(smtp_started_at=timezone.now())
            == 1
        )


def _smtp(credentials: dict[str, Any], timeout: int) -> smtplib.SMTP:
    host, port, security = credentials["host"], int(credentials["port"]), credentials.get("security", "ssl")
    try:
        require_public_host(host, port, "smtp.host")
    except MailServerError:
        raise OSError("the SMTP host is on a private network") from None  # before any SMTP traffic: failed
    smtp: smtplib.SMTP
    if security == "ssl":
        smtp = smtplib.SMTP_SSL(host, port, timeout=timeout, context=ssl.create_default_context())
    else:
        smtp = smtplib.SMTP(host, port, timeout=timeout)
    smtp.ehlo()
    if security == "starttls":
        smtp.starttls(context=ssl.create_default_context())
        smtp.ehlo()
    if credentials.get("username"):
        smtp.login(credentials["username"], credentials.get("password", ""))
    return smtp


def _quit(smtp: smtplib.SMTP | None) -> None:
    if smtp is None:
        return
    try:
        smtp.quit()
    except (smtplib.SMTPException, OSError):
        smtp.close()


def _transmit(request: OutboundRequest, raw: bytes) -> Outcome | None:
    """One SMTP transaction; None when the claim was taken back before DATA (nothing sent)."""
    credentials = _credentials(request.account, "smtp")
    if request.account.kind != "imap" or not credentials:
        return Outcome(State.FAILED, "account_cannot_send")
    envelope = [*request.to, *request.cc, *request.bcc]
    smtp: smtplib.SMTP | None = None
    data_begun = False
    try:
        smtp = _smtp(credentials, settings.OPERATIONS["SMTP_TIMEOUT_SECONDS"])
        code, _ = smtp.mail(request.sender)
        if code != 250:
            return Outcome(State.FAILED, "sender_refused")
        refused = []
        for address in envelope:
            code, _ = smtp.rcpt(address)
            if code not in (250, 251):
                refused.append(address)
        if len(refused) == len(envelope):
            return Outcome(State.FAILED, "recipients_refused", refused)
        if not _data_may_begin(request):
            smtp.rset()
            return None
        data_begun = True
        code, _ = smtp.data(raw)
        if code != 250:
            return Outcome(State.FAILED, "message_refused", refused)
        return Outcome(State.SENT, "", refused)
    except smtplib.SMTPAuthenticationError:
        return Outcome(State.FAILED, "smtp_login_refused")
    except smtplib.SMTPResponseException:
        # a definite answer from the server (DATA refused, or refused after the message): not sent
        return Outcome(State.FAILED, "message_refused" if data_begun else "smtp_refused")
    except (TimeoutError, smtplib.SMTPException, OSError):
        if data_begun:
            # the server may have taken the message: never retried, reconciled by Message-ID
            return Outcome(State.UNKNOWN, "connection_lost_after_data")
        return Outcome(State.FAILED, "smtp_unreachable")
    finally:
        _quit(smtp)


def mime_of(request: OutboundRequest) -> bytes:
    attachments = [(a.filename, a.content_type, bytes(a.content)) for a in request.attachments.order_by("position")]
    return build_mime(
        sender=request.sender, sender_name=request.account.name if "@" not in request.account.name else "",
        to=request.to, cc=request.cc, subject=request.subject, body=request.body, message_id=request.message_id,
        in_reply_to=request.in_reply_to, references=request.references, date=request.created_at,
        attachments=attachments,
    )  # fmt: skip


def load(request_id: Any) -> OutboundRequest | None:
    """A request by id, for system work (tasks), with its tenant and account."""
    return OutboundRequest.objects.unscoped().filter(pk=request_id).select_related("tenant", "account").first()


def deliver(request_id: Any) -> str:
    """Deliver one request if this worker wins its claim; the state it ends in, or 'not claimed'."""
    request = load(request_id)
    if request is None or not _claim(request):
        return "not claimed"
    request.refresh_from_db()
    if stored_digest(request) != request.content_hash:
        # what was approved is what is sent: content that moved after approval is never sent
        _finish(request, Outcome(State.FAILED, "content_changed"))
        return State.FAILED
    raw = mime_of(request)
    outcome = _transmit(request, raw)
    if outcome is None:
        return "not claimed"
    _finish(request, outcome)
    if outcome.state == State.SENT:
        copy_to_sent(request, raw)
    return outcome.state


# ---------------------------------------------------------------- IMAP: the Sent folder


def _sent_folder(client: IMAPClient) -> str | None:
    found = client.find_special_folder(SENT)
    if found:
        return str(found)
    names = {str(name) for _, _, name in client.list_folders()}
    return next((n for n in _SENT_NAMES if n in names), None)


def _in_sent(client: IMAPClient, folder: str, message_id: str) -> bool:
    client.select_folder(folder, readonly=True)
    return bool(client.search(["HEADER", "Message-ID", f"<{message_id}>"]))


def copy_to_sent(request: OutboundRequest, raw: bytes) -> bool:
    """Put the sent copy in Sent unless the server already did (best effort: the mail is sent either way)."""
    credentials = _credentials(request.account, "imap")
    if not credentials:
        return False
    try:
        with open_imap(credentials) as client:
            folder = _sent_folder(client)
            if folder is None:
                return False
            if not _in_sent(client, folder, request.message_id):
                client.append(folder, raw, flags=(b"\\Seen",))
    except Exception as exc:  # IMAP trouble never changes what was sent
        log.warning("could not copy outbound request %s to Sent: %s", request.pk, type(exc).__name__)
        return False
    OutboundRequest.objects.for_tenant(request.tenant).filter(pk=request.pk).update(copied_to_sent=True)
    return True


def reconcile(request_id: Any) -> str:
    """For an unknown outcome: the request's Message-ID in Sent means sent. Absent, it stays unknown (the
    server may have delivered it without keeping a copy), for a person to look at; it is never resent."""
    request = load(request_id)
    if request is None or request.state != State.UNKNOWN:
        return "not unknown"
    credentials = _credentials(request.account, "imap")
    found = False
    if credentials:
        try:
            with open_imap(credentials) as client:
                folder = _sent_folder(client)
                found = folder is not None and _in_sent(client, folder, request.message_id)
        except Exception as exc:
            log.warning("could not reconcile outbound request %s: %s", request.pk, type(exc).__name__)
    with transaction.atomic():
        rows = OutboundRequest.objects.for_tenant(request.tenant).filter(pk=request.pk)
        if not found:
            rows.filter(state=State.UNKNOWN).update(reconcile_attempts=request.reconcile_attempts + 1)
            return State.UNKNOWN
        if transition(request.tenant, request.pk, State.UNKNOWN, State.SENT, finished_at=timezone.now(),
                      error="", copied_to_sent=True) is None:  # fmt: skip
            return "not unknown"
        audit_task_transition(request.tenant, "reconcile_outbound", request.pk, State.UNKNOWN, State.SENT,
                              found_in="sent")  # fmt: skip
    return State.SENT


# ---------------------------------------------------------------- schedules


def release_scheduled(now: Any = None) -> int:
    """Queue approved requests whose send time has come (picked from the database, never a long ETA)."""
    now = now or timezone.now()
    due = OutboundRequest.objects.unscoped().filter(state=State.APPROVED, send_at__lte=now)
    released = 0
    for request in due.select_related("tenant")[:500]:
        with transaction.atomic():
            if transition(request.tenant, request.pk, State.APPROVED, State.QUEUED) is None:
                continue
            OutboxEntry.objects.for_tenant(request.tenant).filter(request=request).update(enqueued_at=now)
            audit_task_transition(request.tenant, "release_scheduled_send", request.pk, State.APPROVED, State.QUEUED)
            enqueue_on_commit(request.pk)
        released += 1
    return released


def sweep(now: Any = None) -> dict[str, int]:
    """Hand queued requests whose task was lost to a worker again; take back claims of workers that died
    before DATA (nothing was sent); mark claims that died after DATA began as unknown (for reconciliation)."""
    now = now or timezone.now()
    bounds = settings.OPERATIONS
    lost_before = now - timedelta(seconds=bounds["OUTBOX_REQUEUE_SECONDS"])
    stale_before = now - timedelta(seconds=bounds["SENDING_STALE_SECONDS"])
    counts = {"requeued": 0, "reclaimed": 0, "unknown": 0}
    entries = (
        OutboxEntry.objects.unscoped()
        .filter(request__state=State.QUEUED)
        .filter(Q(enqueued_at__isnull=True) | Q(enqueued_at__lt=lost_before))
    )
    for entry in entries.select_related("tenant")[:500]:
        with transaction.atomic():
            rows = OutboxEntry.objects.for_tenant(entry.tenant).filter(pk=entry.pk, request__state=State.QUEUED)
            if rows.filter(Q(enqueued_at__isnull=True) | Q(enqueued_at__lt=lost_before)).update(
                enqueued_at=now, enqueue_count=entry.enqueue_count + 1
            ):
                enqueue_on_commit(entry.request_id)
                counts["requeued"] += 1
    stale = OutboundRequest.objects.unscoped().filter(state=State.SENDING, updated_at__lt=stale_before)
    for request in stale.select_related("tenant")[:500]:
        with transaction.atomic():
            rows = OutboundRequest.objects.for_tenant(request.tenant).filter(pk=request.pk, state=State.SENDING,
                                                                               updated_at__lt=stale_before)  # fmt: skip
            if rows.filter(smtp_started_at__isnull=True).update(state=State.QUEUED, updated_at=now):
                OutboxEntry.objects.for_tenant(request.tenant).filter(request=request).update(enqueued_at=now)
                audit_task_transition(request.tenant, "sweep_outbox", request.pk, State.SENDING, State.QUEUED)
                enqueue_on_commit(request.pk)
                counts["reclaimed"] += 1
            elif rows.filter(smtp_started_at__isnull=False).update(state=State.UNKNOWN, updated_at=now,
                                                                   error="worker_lost_after_data"):  # fmt: skip
                audit_task_transition(request.tenant, "sweep_outbox", request.pk, State.SENDING, State.UNKNOWN)
                counts["unknown"] += 1
    return counts
