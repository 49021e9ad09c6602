"""People in the browser: sign up (with e-mail verification), sign in, sign out, password reset."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import PasswordResetForm, SetPasswordForm
from django.contrib.auth.hashers import make_password
from django.core import signing
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse_lazy
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from apps.accounts import mail, mailbound, signin, tasks
from apps.accounts.models import User
from apps.core.links import public_origin
from apps.people_pages.forms import SignUpForm
from apps.workspaces.services import PersonExistsError, create_person


def _mail_unavailable(request: HttpRequest) -> HttpResponse:
    return render(request, "people_pages/mail_unavailable.html", status=503)


@require_http_methods(["GET", "POST"])
def sign_up(request: HttpRequest) -> HttpResponse:
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        email, password = form.cleaned_data["email"], form.cleaned_data["password"]
        try:
            allowed = mailbound.may_send(request, email)
        except mailbound.MailUncountableError:
            return _mail_unavailable(request)
        # Every answer is the same page after the same work (one password hash, one mail handed to a worker), so
        # neither the wording nor the time it takes tells which addresses have accounts; the owner of a known
        # address hears about the attempt instead. The mail leaves from the worker: SMTP's time is not the page's.
        try:
            if not allowed:
                make_password(password)
            elif getattr(form, "existing", False):
                make_password(password)
                tasks.queue(tasks.send_already_signed_up_task, email=email)
            else:
                try:
                    # committed here (no request-wide transaction), so the worker finds the person
                    person = create_person(email=email, password=password, tenant_name=form.cleaned_data["tenant"])
                except PersonExistsError:  # signed up a moment ago, by another request
                    tasks.queue(tasks.send_already_signed_up_task, email=email)
                else:
                    user_id, origin = str(person.user.pk), public_origin(request)
                    tasks.queue(tasks.send_verification_task, user_id=user_id, origin=origin)
        except tasks.MailUnqueuedError:
            return _mail_unavailable(request)
        return redirect("check-mail")
    return render(request, "people_pages/sign_up.html", {"form": form}, status=400 if form.errors else 200)


class PasswordResetView(auth_views.PasswordResetView):
    """Django's reset by mail, its mail bounded per address and client, its link on this service's origin, sent
    by a worker: the page does the same work whether the address has an account or not (it hands the address to
    a worker, which looks it up), and never waits on an SMTP server."""

    template_name = "people_pages/password_reset.html"
    success_url = reverse_lazy("password-reset-sent")

    def form_valid(self, form: PasswordResetForm) -> HttpResponse:
        email = form.cleaned_data["email"]
        try:
            allowed = mailbound.may_send(self.request, email)
        except mailbound.MailUncountableError:
            return _mail_unavailable(self.request)
        if allowed:  # past a bound, the same page as a sent link: nothing tells whether the address has an account
            try:
                tasks.queue(tasks.send_password_reset_task, email=email, origin=public_origin(self.request))
            except tasks.MailUnqueuedError:
                return _mail_unavailable(self.request)
        return HttpResponseRedirect(self.get_success_url())


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    """Choosing the new password also lifts the sign-in lock of the address (the lock message offers this)."""

    template_name = "people_pages/password_reset_confirm.html"
    success_url = reverse_lazy("password-reset-done")

    def form_valid(self, form: SetPasswordForm) -> HttpResponse:
        response = super().form_valid(form)
        signin.clear(form.user.email)
        return response


def check_mail(request: HttpRequest) -> HttpResponse:
    return render(request, "people_pages/check_mail.html")


def verify_email(request: HttpRequest, token: str) -> HttpResponse:
    try:
        claim = signing.TimestampSigner(salt=mail.VERIFY_SALT).unsign_object(
            token, max_age=settings.EMAIL_VERIFICATION_MAX_AGE_SECONDS
        )
        user = User.objects.get(pk=claim["user"], email=claim["email"], is_active=True)
    except (signing.BadSignature, User.DoesNotExist, KeyError, ValueError, TypeError):
        return render(request, "people_pages/verify_failed.html", status=400)
    if user.email_verified_at is None:
        user.email_verified_at = timezone.now()
        user.save(update_fields=["email_verified_at"])
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    return redirect("console")
