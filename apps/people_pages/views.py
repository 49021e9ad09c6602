"""People in the browser: sign up (with e-mail verification), sign in, sign out, password reset; and joining a
tenant from an invitation, which the console's invitation page leaves in the session as a signed reference
(apps.workspaces.selectors.SESSION_INVITATION_KEY): signing up from it makes no tenant of the person's own unless
asked, and its confirmation link, or signing in, accepts it (the operation accept_invitation, called here in the
invitation's tenant as the console's invitation page calls it)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import PasswordResetForm, SetPasswordForm
from django.contrib.auth.hashers import make_password
from django.core import signing
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse, reverse_lazy
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from apps.accounts import mail, mailbound, signin, tasks
from apps.accounts import services as account_services
from apps.accounts.models import User, normalize_email
from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.core.kinds import Door, Principal
from apps.core.links import public_origin
from apps.gate.dispatch import dispatch
from apps.people_pages.forms import InvitedSignUpForm, NewTenantForm, SignInForm, SignUpForm
from apps.workspaces.models import Invitation
from apps.workspaces.selectors import (
    SESSION_INVITATION_KEY,
    SESSION_TENANT_KEY,
    InvitationRefusedError,
    NotAMemberError,
    access_invitation_by_reference,
    access_membership,
    invitation_reference,
    open_invitation_by_reference,
)
from apps.workspaces.services import PersonExistsError, create_invitee, create_person, create_tenant


def _mail_unavailable(request: HttpRequest) -> HttpResponse:
    return render(request, "people_pages/mail_unavailable.html", status=503)


def _pending_invitation(request: HttpRequest) -> Invitation | None:
    """The invitation whose link this browser opened last (its reference in the session), while it can still be
    accepted; a reference gone bad is dropped."""
    reference = request.session.get(SESSION_INVITATION_KEY)
    if not reference:
        return None
    row = open_invitation_by_reference(reference=str(reference), now=timezone.now())
    if row is None:
        del request.session[SESSION_INVITATION_KEY]
    return row


_REFUSED_STATUS = {"unknown": 404, "wrong_person": 403, "unverified": 403}


def _join(request: HttpRequest, user: User, reference: str) -> HttpResponse:
    """Accept the invitation `reference` names for `user`, just signed in (through the gate, in its tenant, where
    they are not a member yet), and open the console there; or say why it cannot be used."""
    try:
        row = access_invitation_by_reference(user=user, reference=reference, now=timezone.now())
        caller = Caller(Principal.PERSON, row.tenant, user=user)  # no role there yet: the operation needs none
        try:
            dispatch(caller, Door.UI, "accept_invitation", {"reference": reference})
        except OakenError:
            # taken, cancelled or expired since it was read: reading it again says which
            access_invitation_by_reference(user=user, reference=reference, now=timezone.now())
            raise
    except InvitationRefusedError as refused:
        status = _REFUSED_STATUS.get(refused.reason, 410)
        return render(request, "console/invitation_refused.html", {"reason": refused.reason}, status=status)
    request.session[SESSION_TENANT_KEY] = str(row.tenant_id)
    return redirect("console")


@require_http_methods(["GET", "POST"])
def sign_up(request: HttpRequest) -> HttpResponse:
    invitation = _pending_invitation(request)
    form: SignUpForm
    if invitation is not None:
        form = InvitedSignUpForm(request.POST or None, invited_email=invitation.email)
    else:
        form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        email, password = form.cleaned_data["email"], form.cleaned_data["password"]
        # whatever the address: the confirmation link signs in only the browser that signed up (verify_email)
        request.session[SIGNED_UP_KEY] = normalize_email(email)
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
                    if isinstance(form, InvitedSignUpForm) and invitation is not None:
                        user = create_invitee(email=email, password=password, tenant_name=form.tenant_name())
                        joining = str(invitation.pk)
                    else:
                        tenant_name = form.cleaned_data["tenant"]
                        user = create_person(email=email, password=password, tenant_name=tenant_name).user
                        joining = ""
                except PersonExistsError:  # signed up a moment ago, by another request
                    tasks.queue(tasks.send_already_signed_up_task, email=email)
                else:
                    account_services.set_name(user=user, name=form.cleaned_data.get("name") or "")
                    # the invitation by id only, and only for an invitee: a task carries no token (apps.accounts.tasks)
                    sent = {"user_id": str(user.pk), "origin": public_origin(request)}
                    if joining:
                        sent["invitation_id"] = joining
                    tasks.queue(tasks.send_verification_task, **sent)
        except tasks.MailUnqueuedError:
            return _mail_unavailable(request)
        return redirect("check-mail")
    return render(
        request,
        "people_pages/sign_up.html",
        {"form": form, "invitation": invitation},
        status=400 if form.errors else 200,
    )


class SignInView(auth_views.LoginView):
    """Django's sign-in (SignInForm); opened from an invitation, it names the invitation, and signing in accepts it
    and opens the console in its tenant."""

    template_name = "people_pages/sign_in.html"
    authentication_form = SignInForm

    def get_form_kwargs(self) -> dict[str, object]:
        kwargs = super().get_form_kwargs()
        invitation = _pending_invitation(self.request)
        if invitation is not None and self.request.method == "GET":
            kwargs["initial"] = {**kwargs.get("initial", {}), "username": invitation.email}
        return kwargs

    def get_context_data(self, **kwargs: object) -> dict[str, object]:
        return {**super().get_context_data(**kwargs), "invitation": _pending_invitation(self.request)}

    def form_valid(self, form: SignInForm) -> HttpResponse:  # type: ignore[override]
        reference = self.request.session.pop(SESSION_INVITATION_KEY, None)
        response = super().form_valid(form)
        if reference:
            return _join(self.request, form.get_user(), str(reference))
        return response


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


# the address this browser signed up with (the confirmation link signs in only here)
SIGNED_UP_KEY = "signed_up_as"


def check_mail(request: HttpRequest) -> HttpResponse:
    return render(request, "people_pages/check_mail.html")


def verify_email(request: HttpRequest, token: str) -> HttpResponse:
    """Confirm the address and sign the person in; a person who signed up from an invitation joins its tenant (the
    first time the link is followed)."""
    try:
        claim = signing.TimestampSigner(salt=mail.VERIFY_SALT).unsign_object(
            token, max_age=settings.EMAIL_VERIFICATION_MAX_AGE_SECONDS
        )
        user = User.objects.get(pk=claim["user"], email=claim["email"], is_active=True)
        invitation_id = uuid.UUID(claim["invitation"]) if "invitation" in claim else None
    except (signing.BadSignature, User.DoesNotExist, KeyError, ValueError, TypeError):
        return render(request, "people_pages/verify_failed.html", status=400)
    first_time = user.email_verified_at is None
    if first_time:
        user.email_verified_at = timezone.now()
        user.save(update_fields=["email_verified_at"])
    # signed in only by the first use, in the browser that signed up: a link that signs in whoever follows it
    # would let its owner sign a victim into the owner's account (whose tenant then receives what the victim does)
    here = first_time and request.session.get(SIGNED_UP_KEY) == normalize_email(user.email)
    if here:
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    if invitation_id is not None and first_time:
        request.session.pop(SESSION_INVITATION_KEY, None)
        joined = _join(request, user, invitation_reference(invitation_id))
        if here or joined.status_code != 302:
            return joined
    if here:
        return redirect("console")
    return redirect(f"{reverse('sign-in')}?confirmed=1")


@login_required
@require_http_methods(["GET", "POST"])
def new_tenant(request: HttpRequest) -> HttpResponse:
    """A tenant of the person's own, which they own (for a person who belongs to none, or wants another one)."""
    user: User = request.user  # type: ignore[assignment]
    try:
        access_membership(user=user)
        has_tenant = True
    except NotAMemberError:
        has_tenant = False
    form = NewTenantForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        tenant, _, _ = create_tenant(owner=user, name=form.cleaned_data["name"])
        account_services.remember_tenant(user=user, tenant_id=tenant.pk, now=timezone.now())
        request.session[SESSION_TENANT_KEY] = str(tenant.pk)
        return redirect("console")
    return render(
        request,
        "people_pages/new_tenant.html",
        {"form": form, "has_tenant": has_tenant},
        status=400 if form.errors else 200,
    )
