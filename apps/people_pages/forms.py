"""Sign-up and sign-in forms. Errors name the field and never repeat what was typed."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth import authenticate, password_validation
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError

from apps.accounts import signin
from apps.accounts.models import User, normalize_email
from apps.core.bounds import bounds
from apps.core.names import display_name_problem


class SignUpForm(forms.Form):
    email = forms.EmailField(max_length=254)
    password = forms.CharField(widget=forms.PasswordInput, strip=False, max_length=200)
    name = forms.CharField(
        label="Your name (optional: mail you send shows it before your address)", max_length=200, required=False
    )
    tenant = forms.CharField(label="Tenant name (your organization, your team or your own name)", max_length=200)

    def clean_email(self) -> str:
        email = normalize_email(self.cleaned_data["email"])
        if User.objects.for_email(email).exists():
            # the same answer as a fresh sign-up, so addresses cannot be probed: see the view
            self.existing = True
        return email

    def clean_name(self) -> str:
        """The person's name (User.name): held to the rule and the bound of set_preferences' `name`."""
        name = str(self.cleaned_data.get("name") or "")
        problem = display_name_problem(name)
        if problem is not None:
            raise ValidationError(f"Your name {problem}.", code="invalid")
        if len(name) > bounds.SENDER_NAME_MAX_CHARS:
            raise ValidationError(f"Your name: at most {bounds.SENDER_NAME_MAX_CHARS} characters.", code="long")
        return name

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "password" in data:
            try:
                password_validation.validate_password(data["password"], User(email=data.get("email", "")))
            except ValidationError as exc:
                self.add_error("password", exc)
        return data


class InvitedSignUpForm(SignUpForm):
    """Signing up from an invitation: the invited address (prefilled, and no other), and no tenant of one's own
    unless asked for (the person joins the inviting tenant once their address is confirmed)."""

    tenant = None  # type: ignore[assignment]
    own_tenant = forms.BooleanField(label="Create my own tenant too", required=False)
    own_tenant_name = forms.CharField(
        label="Name of your own tenant (if you create one; your address otherwise)", max_length=200, required=False
    )

    def __init__(self, *args: Any, invited_email: str, **kwargs: Any) -> None:
        kwargs["initial"] = {**kwargs.get("initial", {}), "email": invited_email}
        super().__init__(*args, **kwargs)
        self.invited_email = invited_email
        self.fields["email"].widget.attrs.update({"readonly": True, "autocomplete": "email"})
        self.fields["email"].help_text = "The address the invitation was sent to."

    def clean_email(self) -> str:
        email = super().clean_email()
        if email != normalize_email(self.invited_email):
            raise ValidationError("Sign up with the address the invitation was sent to.", code="not_invited")
        return email

    def tenant_name(self) -> str | None:
        """The name of the person's own tenant, None when they asked for none."""
        if not self.cleaned_data.get("own_tenant"):
            return None
        return self.cleaned_data.get("own_tenant_name", "").strip() or self.cleaned_data["email"]


class NewTenantForm(forms.Form):
    name = forms.CharField(label="Tenant name (your team or your own name)", max_length=200)


class SignInForm(AuthenticationForm):
    """Django's sign-in, refusing locked or slowed attempts and unverified addresses, and counting failures per
    address and client (apps.accounts.signin). The answers are the same whether the address has an account."""

    error_messages = {
        **AuthenticationForm.error_messages,
        "locked": "Too many failed attempts. Wait a few minutes, or reset your password.",
        "slowed": "Too many attempts just now. Try again in a minute, or reset your password.",
        "unverified": "Confirm your e-mail address first: follow the link we sent you.",
    }

    def clean(self) -> dict[str, Any]:
        email = normalize_email(self.cleaned_data.get("username") or "")
        password = self.cleaned_data.get("password")
        if email and password:
            client = signin.client_of(self.request) if self.request is not None else ""
            verdict = signin.check(email, client)
            if verdict is not signin.Verdict.ALLOWED:
                raise ValidationError(self.error_messages[verdict.value], code=verdict.value)
            self.user_cache = authenticate(self.request, username=email, password=password)
            if self.user_cache is None:
                signin.record_failure(email, client)
                raise self.get_invalid_login_error()
            self.confirm_login_allowed(self.user_cache)
            if getattr(self.user_cache, "email_verified_at", None) is None:
                raise ValidationError(self.error_messages["unverified"], code="unverified")
            signin.succeeded(email, client)
        return self.cleaned_data
