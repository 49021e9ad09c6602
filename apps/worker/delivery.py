"""Delivering an approved request over SMTP at most once, and reconciling an unknown outcome over IMAP.

This is the worker's side (the internal door): every state change is an internal operation called through the
gate (apps.operations.defs.delivery, rules in apps.outbound.execution), each its own committed, audited
transaction, and the network conversation happens between them. The protocol (SPEC §10):
1. claim: due (queued and available, or approved and its time come) → sending as attempt n, committed before
   any SMTP traffic, so of any number of workers handed the same request only one goes on;
2. connect, EHLO, AUTH, MAIL FROM, RCPT TO. A failure here certainly sent nothing: a connection refused or
   timed out, or a 4xx reply, is `temporary` (queued again after a backoff while attempts are left, picked up
   by the sweeper from the outbox row's available_at); a 5xx reply is a refusal (failed at once);
3. record that DATA begins (only while this claim holds) and commit, then DATA;
4. 250 → sent; a definite refusal → failed; a lost connection or timeout once DATA began → unknown, never
   retried: reconciliation looks for the request's own Message-ID in the Sent folder, or a person settles it;
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

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from imapclient import IMAPClient
from imapclient.imapclient import SENT

from apps.core.bounds import bounds
from apps.core.errors import OakenError
from apps.gate.internal import call_internal
from apps.mail.imap import MailServerError, name_checking_context, open_imap, pinned_address, smtp_authenticate
from apps.mail.oauth.tokens import login_config
from apps.outbound import oneclick
from apps.outbound import requests as outbound_requests
from apps.outbound.automations import forward_mark
from apps.outbound.compose import build_mime
from apps.outbound.models import Automation, AutomationKind, Kind, OutboundRequest, OutboxEntry, State

log = logging.getLogger("oaken.outbound")

_SENT_NAMES = ("Sent", "Sent Items", "Sent Messages", "INBOX.Sent", "INBOX/Sent")


@dataclass
class Outcome:
    """What one SMTP conversation says, in the terms of record_outbound_outcome."""

    kind: str  # "sent" | "refused" | "temporary" | "unknown"
    error: str = ""
    refused: list[str] = field(default_factory=list)
    http_status: int | None = None


class _PrivateHost(Exception):
    """The SMTP host is on a private network: refused before any connection."""


def _credentials(account: Any, kind: str) -> dict[str, Any] | None:
    """The account's "imap" or "smtp" login settings (decrypted in memory only, never logged; for an OAuth mailbox
    with a fresh access token); None when there are none, or they cannot be decrypted (the person enters them
    again: the console says so after the next sync). MailServerError when an OAuth mailbox's token cannot be had:
    "needs_reconnect" (the provider refused the grant) or "token_refresh_failed" (the provider is away for now)."""
    try:
        return login_config(account, kind)
    except MailServerError as exc:
        if exc.reason in ("credentials_unreadable", "not_connected"):
            if exc.reason == "credentials_unreadable":
                log.warning("the credentials of mail account %s cannot be decrypted", account.pk)
            return None
        raise


def _step(request: OutboundRequest, name: str, **fields: Any) -> dict[str, Any]:
    """One state change through the gate's internal door (its own transaction, audited); OakenError if refused."""
    return call_internal(request.tenant, name, {"request_id": str(request.pk), **fields}).output


def _data_may_begin(request: OutboundRequest, attempt: int) -> bool:
    """Record, before DATA, that DATA began; False when that could not be recorded (a sweeper took the claim
    back, or the database is away): then DATA is never sent."""
    try:
        _step(request, "begin_outbound_data", attempt=attempt)
    except Exception as exc:
        log.warning("outbound request %s: DATA not begun: %s", request.pk, getattr(exc, "code", type(exc).__name__))
        return False
    return True


def _ehlo(smtp: smtplib.SMTP) -> None:
    code, _ = smtp.ehlo()
    if code != 250:
        raise smtplib.SMTPHeloError(code, b"")


def _smtp(credentials: dict[str, Any], timeout: int) -> smtplib.SMTP:
    host, port, security = credentials["host"], int(credentials["port"]), credentials.get("security", "ssl")
    try:
        address = pinned_address(host, port, "smtp.host")
    except MailServerError:
        raise _PrivateHost from None
    smtp: smtplib.SMTP
    if security == "ssl":
        smtp = smtplib.SMTP_SSL(address, port, timeout=timeout, context=name_checking_context(host))
    else:
        smtp = smtplib.SMTP(address, port, timeout=timeout)
    try:
        _ehlo(smtp)
        if security == "starttls":
            smtp.starttls(context=name_checking_context(host))
            _ehlo(smtp)
        smtp_authenticate(smtp, credentials)
    except BaseException:
        smtp.close()
        raise
    return smtp


def _quit(smtp: smtplib.SMTP | None) -> None:
    if smtp is None:
        return
    try:
        smtp.quit()
    except (smtplib.SMTPException, OSError):
        smtp.close()


def _temporary(code: int) -> bool:
    return 400 <= code < 500


def _transmit(request: OutboundRequest, raw: bytes, attempt: int) -> Outcome | None:
    """One SMTP transaction; None when DATA could not be recorded as begun (nothing was sent)."""
    try:
        credentials = _credentials(request.account, "smtp") if request.account.kind == "imap" else None
    except MailServerError as exc:
        # a withdrawn grant is not retried (the person reconnects and sends again); a provider away for now is
        if exc.reason == "token_refresh_failed":
            return Outcome("temporary", "smtp_token_refresh_failed")
        return Outcome("refused", f"smtp_{exc.reason}")
    if not credentials:
        return Outcome("refused", "account_cannot_send")
    envelope = [*request.to, *request.cc, *request.bcc]
    smtp: smtplib.SMTP | None = None
    data_begun = False
    try:
        smtp = _smtp(credentials, bounds.SMTP_TIMEOUT_SECONDS)
        code, _ = smtp.mail(request.sender)
        if code != 250:
            return Outcome("temporary", "sender_deferred") if _temporary(code) else Outcome("refused", "sender_refused")
        refused, deferred = [], False
        for address in envelope:
            code, _ = smtp.rcpt(address)
            if code not in (250, 251):
                refused.append(address)
                deferred = deferred or _temporary(code)
        if len(refused) == len(envelope):
            # nobody would get it: try again later if any refusal was temporary (a partial one is sent as it is)
            return (
                Outcome("temporary", "recipients_deferred", refused)
                if deferred
                else Outcome("refused", "recipients_refused", refused)
            )
        if not _data_may_begin(request, attempt):
            smtp.rset()
            return None
        data_begun = True
        code, _ = smtp.data(raw)
        if code != 250:
            return Outcome("refused", "message_refused", refused)
        return Outcome("sent", "", refused)
    except _PrivateHost:
        return Outcome("refused", "smtp_host_private")
    except MailServerError as exc:  # the login cannot be carried (characters the server's AUTH cannot take)
        return Outcome("refused", f"smtp_{exc.reason}")
    except smtplib.SMTPAuthenticationError as exc:
        return (
            Outcome("temporary", "smtp_login_deferred")
            if _temporary(exc.smtp_code)
            else Outcome("refused", "smtp_login_refused")
        )
    except smtplib.SMTPResponseException as exc:
        if data_begun:
            # a definite answer to DATA or to the message: not taken; never retried once DATA began
            return Outcome("refused", "message_refused")
        return (
            Outcome("temporary", "smtp_deferred") if _temporary(exc.smtp_code) else Outcome("refused", "smtp_refused")
        )
    except (TimeoutError, smtplib.SMTPServerDisconnected, OSError) as exc:
        if data_begun:
            # the server may have taken the message: never retried, reconciled by Message-ID
            return Outcome("unknown", "connection_lost_after_data")
        if isinstance(exc, ssl.SSLError):
            return Outcome("refused", "smtp_tls_failed")
        return Outcome("temporary", "smtp_unreachable")  # refused, timed out or dropped: nothing was sent
    except smtplib.SMTPException:
        if data_begun:
            return Outcome("unknown", "connection_lost_after_data")
        return Outcome("refused", "smtp_unsupported")  # e.g. no STARTTLS or no AUTH method in common
    except Exception as exc:
        # a fault of ours: it would fault again on every retry, so it settles the request (failed before DATA,
        # unknown after: the server may have it); only its type is logged, never what it says
        log.error("outbound request %s: delivery failed: %s", request.pk, type(exc).__name__)
        return Outcome("unknown", "delivery_failed") if data_begun else Outcome("refused", "delivery_failed")
    finally:
        _quit(smtp)


def _post_one_click(request: OutboundRequest, attempt: int) -> Outcome | None:
    """A one-click unsubscribe: the POST, marked as begun (like DATA) before its first byte; None when the mark
    could not be recorded (nothing was sent)."""
    try:
        posted = oneclick.post_one_click(
            request.unsubscribe_url,
            timeout=bounds.UNSUBSCRIBE_TIMEOUT_SECONDS,
            begin=lambda: _data_may_begin(request, attempt),
        )
    except Exception as exc:
        # a fault of ours: whether the POST began is what the database says (the sweeper settles it if it did)
        log.error("outbound request %s: the one-click POST failed: %s", request.pk, type(exc).__name__)
        fresh = load(request.pk)
        begun = fresh is not None and fresh.smtp_started_at is not None
        return Outcome("unknown", "delivery_failed") if begun else Outcome("refused", "delivery_failed")
    if posted is None:
        return None
    return Outcome(posted.kind, posted.error, http_status=posted.http_status)


def mime_of(request: OutboundRequest) -> bytes:
    attachments = [(a.filename, a.content_type, bytes(a.content)) for a in request.attachments.order_by("position")]
    return build_mime(
        sender=request.sender,
        sender_name=request.sender_name,
        to=request.to,
        cc=request.cc,
        subject=request.subject,
        body=request.body,
        message_id=request.message_id,
        in_reply_to=request.in_reply_to,
        references=request.references,
        date=request.created_at,
        attachments=attachments,
        automatic=automatic_headers(request.automation) if request.approved_via == "standing" else (),
    )


def automatic_headers(automation: Automation | None) -> tuple[tuple[str, str], ...]:
    if automation is not None and automation.kind == AutomationKind.FORWARD:
        return (("Auto-Submitted", "auto-generated"), ("X-Oaken-Forwarded", forward_mark(automation.account_id)))
    return (("Auto-Submitted", "auto-replied"),)


def load(request_id: Any) -> OutboundRequest | None:
    """A request by id, for system work (tasks), with its tenant and account."""
    return OutboundRequest.objects.unscoped().filter(pk=request_id).select_related("tenant", "account").first()


def deliver(request_id: Any) -> str:
    """Deliver one request if this worker wins its claim; the state it ends in, or 'not claimed'."""
    request = load(request_id)
    if request is None:
        return "not claimed"
    try:
        claimed = _step(request, "claim_outbound_send")
    except OakenError:
        return "not claimed"  # not due, or another worker has it (the refusal is audited)
    if claimed["state"] != State.SENDING:
        return str(claimed["state"])  # the content moved after approval: failed, never sent
    request = load(request_id)
    assert request is not None
    outcome: Outcome | None
    if request.kind == Kind.UNSUBSCRIBE_POST:
        raw, outcome = b"", _post_one_click(request, claimed["attempt"])
        return _record(request, claimed["attempt"], outcome, raw)
    try:
        raw = mime_of(request)
    except Exception as exc:
        # the message cannot be built (a header that cannot be written, say): it never will be, so it fails now
        log.error("outbound request %s: the message could not be built: %s", request.pk, type(exc).__name__)
        raw, outcome = b"", Outcome("refused", "message_could_not_be_built")
    else:
        outcome = _transmit(request, raw, claimed["attempt"])
    return _record(request, claimed["attempt"], outcome, raw)


def _record(request: OutboundRequest, attempt: int, outcome: Outcome | None, raw: bytes) -> str:
    """Record what the attempt's conversation said; the state the request ends in."""
    if outcome is None:
        return "not claimed"
    try:
        recorded = _step(
            request,
            "record_outbound_outcome",
            attempt=attempt,
            outcome=outcome.kind,
            error=outcome.error,
            refused_recipients=outcome.refused,
            **({"http_status": outcome.http_status} if outcome.http_status is not None else {}),
        )
    except OakenError as error:
        # the claim stays 'sending': the sweeper settles it (unknown once DATA began, queued again before)
        log.error("outbound request %s: the outcome could not be recorded: %s", request.pk, error.code)
        return State.SENDING
    if recorded["state"] == State.SENT and request.kind != Kind.UNSUBSCRIBE_POST:
        copy_to_sent(request, raw)
    return str(recorded["state"])


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
    try:
        credentials = _credentials(request.account, "imap")
        if not credentials:
            return False
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
    server may have delivered it without keeping a copy), for a person to settle; it is never resent."""
    request = load(request_id)
    if request is None or request.state != State.UNKNOWN or request.kind == Kind.UNSUBSCRIBE_POST:
        return "not unknown"  # (a one-click POST leaves nothing in Sent: a person settles it)
    found = False
    try:
        credentials = _credentials(request.account, "imap")
        if credentials:
            with open_imap(credentials) as client:
                folder = _sent_folder(client)
                found = folder is not None and _in_sent(client, folder, request.message_id)
    except Exception as exc:
        log.warning("could not reconcile outbound request %s: %s", request.pk, type(exc).__name__)
    if not found:
        # no state moves: a count of looks, not an event
        OutboundRequest.objects.for_tenant(request.tenant).filter(pk=request.pk, state=State.UNKNOWN).update(
            reconcile_attempts=F("reconcile_attempts") + 1
        )
        return State.UNKNOWN
    try:
        return str(_step(request, "reconcile_outbound")["state"])
    except OakenError:
        return "not unknown"  # settled meanwhile (by a person, or another reconciliation)


# ---------------------------------------------------------------- schedules


def release_scheduled(now: Any = None) -> int:
    """Queue approved requests whose send time has come (picked from the database, never a long ETA)."""
    now = now or timezone.now()
    due = OutboundRequest.objects.unscoped().filter(state=State.APPROVED, send_at__lte=now)
    released = 0
    for request in due.select_related("tenant")[:500]:
        try:
            step = _step(request, "release_scheduled_send")
        except OakenError:
            continue  # cancelled or claimed meanwhile
        if step["state"] == State.QUEUED:  # else failed: its person no longer reaches the mailbox
            released += 1
    return released


def sweep(now: Any = None) -> dict[str, int]:
    """Hand a worker the queued requests that are available and not handed since (a retry whose time came, a
    task that was lost); take back claims of workers gone silent (before DATA: queued again; after: unknown)."""
    now = now or timezone.now()
    lost_before = now - timedelta(seconds=bounds.OUTBOX_REQUEUE_SECONDS)
    stale_before = now - timedelta(seconds=bounds.SENDING_STALE_SECONDS)
    counts = {"requeued": 0, "reclaimed": 0, "unknown": 0}
    waiting = Q(enqueued_at__isnull=True) | Q(enqueued_at__lt=lost_before)
    entries = OutboxEntry.objects.unscoped().filter(waiting, request__state=State.QUEUED, available_at__lte=now)
    # the oldest first: sends that waited for their budgets go in the order they were made
    for entry in entries.select_related("tenant").order_by("available_at", "created_at")[:500]:
        # handing a task over moves no state (the task's claim does, through the gate): a guarded outbox update
        with transaction.atomic():
            rows = OutboxEntry.objects.for_tenant(entry.tenant).filter(waiting, pk=entry.pk)
            if rows.update(enqueued_at=now, enqueue_count=F("enqueue_count") + 1):
                outbound_requests.enqueue_on_commit(entry.request_id)
                counts["requeued"] += 1
    stale = OutboundRequest.objects.unscoped().filter(state=State.SENDING, updated_at__lt=stale_before)
    for request in stale.select_related("tenant")[:500]:
        try:
            step = _step(
                request, "recover_outbound_send", attempt=request.attempts, silent_since=stale_before.isoformat()
            )
        except OakenError:
            continue  # the claim moved on meanwhile
        counts["unknown" if step["state"] == State.UNKNOWN else "reclaimed"] += 1
    return counts
