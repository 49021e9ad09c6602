"""The mail Oaken sends people about their account (address confirmation, attempts to sign up again, password
reset). Its links carry secrets (a signed token that signs the person in, a one-use reset token): they are made
where the mail is sent (apps.accounts.tasks), never handed through the broker, and never logged."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.forms import PasswordResetForm
from django.contrib.auth.tokens import default_token_generator
from django.core import signing
from django.core.mail import send_mail
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from apps.accounts.models import User
from apps.core.links import public_origin

VERIFY_SALT = "oaken.accounts.verify-email"
RESET_SUBJECT_TEMPLATE = "accounts/password_reset_subject.txt"
RESET_BODY_TEMPLATE = "accounts/password_reset_email.txt"

ALREADY_SIGNED_UP = (
    "Someone tried to sign up to Oaken with your address",
    "You already have an account: sign in, or reset your password if you forgot it.",
)


def send(email: str, subject: str, body: str) -> None:
    """The one way this mail leaves (smtplib's errors, OSErrors, reach the caller: a task tries again)."""
    send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [email])


def verification_token(user: User, invitation_id: str = "") -> str:
    """A signed, expiring token naming the user and the address being confirmed, and the invitation they signed up
    from (its id, which the page they signed up on checked: no secret), if any."""
    claim = {"user": str(user.pk), "email": user.email}
    if invitation_id:
        claim["invitation"] = invitation_id
    return signing.TimestampSigner(salt=VERIFY_SALT).sign_object(claim)


def verification(user: User, origin: str | None = None, invitation_id: str = "") -> tuple[str, str]:
    """Subject and body of the mail whose link (on `origin`, else public_origin()) confirms the user's address (and,
    for a person who signed up from an invitation, joins them to its tenant)."""
    link = (origin or public_origin()) + reverse("verify-email", args=[verification_token(user, invitation_id)])
    return (
        "Confirm your e-mail address for Oaken",
        f"Follow this link to confirm your address and sign in:\n\n{link}\n\nIt works for three days.",
    )


def reset_recipients(email: str) -> list[User]:
    """The accounts a reset asked for `email` goes to: Django's rule (active, with a usable password)."""
    return list(PasswordResetForm().get_users(email))


def password_reset(user: User, origin: str) -> tuple[str, str]:
    """Subject and body of the mail whose link (a fresh one-use token, on `origin`) lets the user choose a new
    password; the link is the one Django's PasswordResetConfirmView checks."""
    context = {
        "email": user.email,
        "uid": urlsafe_base64_encode(force_bytes(User._meta.pk.value_to_string(user))),
        "token": default_token_generator.make_token(user),
        "origin": origin,
    }
    subject = "".join(render_to_string(RESET_SUBJECT_TEMPLATE, context).splitlines())
    return subject, render_to_string(RESET_BODY_TEMPLATE, context)
