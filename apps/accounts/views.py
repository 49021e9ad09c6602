"""People in the browser: sign up (with e-mail verification), sign in, sign out, password reset."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import login
from django.core import signing
from django.core.mail import send_mail
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from apps.accounts.forms import SignUpForm
from apps.accounts.models import User
from apps.workspaces.services import create_person

_VERIFY_SALT = "oaken.accounts.verify-email"


def verification_token(user: User) -> str:
    """A signed, expiring token naming the user and the address being confirmed."""
    return signing.TimestampSigner(salt=_VERIFY_SALT).sign_object({"user": str(user.pk), "email": user.email})


def _send_verification(request: HttpRequest, user: User) -> None:
    link = request.build_absolute_uri(reverse("verify-email", args=[verification_token(user)]))
    send_mail(
        "Confirm your e-mail address for Oaken",
        f"Follow this link to confirm your address and sign in:\n\n{link}\n\nIt works for three days.",
        settings.DEFAULT_FROM_EMAIL,
        [user.email],
    )


@require_http_methods(["GET", "POST"])
def sign_up(request: HttpRequest) -> HttpResponse:
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        email = form.cleaned_data["email"]
        if getattr(form, "existing", False):
            # Same answer as a new sign-up, so nobody learns which addresses have accounts;
            # the owner of the address hears about it instead.
            send_mail(
                "Someone tried to sign up to Oaken with your address",
                "You already have an account: sign in, or reset your password if you forgot it.",
                settings.DEFAULT_FROM_EMAIL,
                [email],
            )
        else:
            person = create_person(email=email, password=form.cleaned_data["password"],
                                   tenant_name=form.cleaned_data["tenant"])  # fmt: skip
            _send_verification(request, person.user)
        return redirect("check-mail")
    return render(request, "accounts/sign_up.html", {"form": form}, status=400 if form.errors else 200)


def check_mail(request: HttpRequest) -> HttpResponse:
    return render(request, "accounts/check_mail.html")


def verify_email(request: HttpRequest, token: str) -> HttpResponse:
    try:
        claim = signing.TimestampSigner(salt=_VERIFY_SALT).unsign_object(
            token, max_age=settings.EMAIL_VERIFICATION_MAX_AGE_SECONDS
        )
        user = User.objects.get(pk=claim["user"], email=claim["email"], is_active=True)
    except (signing.BadSignature, User.DoesNotExist, KeyError, ValueError, TypeError):
        return render(request, "accounts/verify_failed.html", status=400)
    if user.email_verified_at is None:
        user.email_verified_at = timezone.now()
        user.save(update_fields=["email_verified_at"])
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    return redirect("console")
