"""Account mail, sent by a worker. The page that asks for it (sign-up, password reset) only hands a task to the
broker, the same work whoever the address belongs to: whether it has an account is looked up here, and the SMTP
server's time is spent here, so neither shows in how long the page takes.

A task carries an address or a user id and the origin links start with, never a token or a link: those are
made here, when the mail is written (a Celery message waits in Redis, where whoever reads the broker reads it,
and tools that list tasks show their arguments). Each task returns nothing: the worker logs what a task returns."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from kombu.exceptions import OperationalError

from apps.accounts import mail
from apps.accounts.models import User

# smtplib's errors are OSErrors: a server away or refusing for now is tried again, a few times, then given up
_RETRY_ON = (OSError,)
# every account mail task: no result kept (the worker would log it), retried while the mail server is away
_MAIL_TASK: dict[str, Any] = {
    "ignore_result": True,
    "autoretry_for": _RETRY_ON,
    "retry_backoff": 30,
    "retry_backoff_max": 600,
    "max_retries": 5,
}


class MailUnqueuedError(Exception):
    """The broker is away: the mail was not handed to a worker (the page says to try again)."""


@shared_task(
    name="accounts.send_password_reset",
    **_MAIL_TASK,
)
def send_password_reset_task(*, email: str, origin: str) -> None:
    """Mail a reset link, with a token made now, to the account of `email`; nothing when it has none."""
    for user in mail.reset_recipients(email):
        mail.send(user.email, *mail.password_reset(user, origin))


@shared_task(
    name="accounts.send_verification",
    **_MAIL_TASK,
)
def send_verification_task(*, user_id: str, origin: str, invitation_id: str = "") -> None:
    """Mail a new person the link that confirms their address (nothing once it is confirmed, or they are gone);
    `invitation_id`: the invitation they signed up from, which the link then accepts."""
    user = User.objects.filter(pk=user_id, is_active=True, email_verified_at__isnull=True).first()
    if user is not None:
        mail.send(user.email, *mail.verification(user, origin, invitation_id))


@shared_task(
    name="accounts.send_already_signed_up",
    **_MAIL_TASK,
)
def send_already_signed_up_task(*, email: str) -> None:
    """Tell the owner of a known address that someone tried to sign up with it."""
    mail.send(email, *mail.ALREADY_SIGNED_UP)


ACCOUNT_MAIL_TASKS = (send_password_reset_task, send_verification_task, send_already_signed_up_task)


def queue(task: Any, **kwargs: str) -> None:
    """Hand account mail to a worker, at once or not at all (MailUnqueuedError): a page never waits on a broker."""
    try:
        task.apply_async(kwargs=kwargs, retry=False)
    except (OperationalError, OSError):
        raise MailUnqueuedError from None
