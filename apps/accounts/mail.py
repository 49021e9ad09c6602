"""The mail Oaken sends people about their account (address confirmation, attempts to sign up again)."""

from __future__ import annotations

from django.conf import settings
from django.core import signing
from django.core.mail import send_mail
from django.http import HttpRequest
from django.urls import reverse

from apps.accounts.models import User
from apps.core.links import absolute_url

VERIFY_SALT = "oaken.accounts.verify-email"

ALREADY_SIGNED_UP = (
    "Someone tried to sign up to Oaken with your address",
    "You already have an account: sign in, or reset your password if you forgot it.",
)


def send(email: str, subject: str, body: str) -> None:
    """The one way this mail leaves, so sign-up costs the same whichever message it sends."""
    send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [email])


def verification_token(user: User) -> str:
    """A signed, expiring token naming the user and the address being confirmed."""
    return signing.TimestampSigner(salt=VERIFY_SALT).sign_object({"user": str(user.pk), "email": user.email})


def verification(user: User, request: HttpRequest | None = None) -> tuple[str, str]:
    """Subject and body of the mail whose link confirms the user's address."""
    link = absolute_url(reverse("verify-email", args=[verification_token(user)]), request)
    return (
        "Confirm your e-mail address for Oaken",
        f"Follow this link to confirm your address and sign in:\n\n{link}\n\nIt works for three days.",
    )
