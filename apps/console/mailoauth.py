"""Connecting a mailbox by OAuth from the Mailboxes page: the start of the flow and the provider's callback.

Start (POST /mailboxes/oauth/start, provider=<name>[&account_id=<id> to reconnect], under the CSRF check) answers
the provider's address the page then sends the signed-in person to, with PKCE and a `state` kept server-side,
bound to the person and the tenant the console acts in, single use and short lived (apps.mail.oauth.flow). The
callback takes the state back, turns the provider's answer into a grant and calls connect_mailbox_oauth through
the gate for the person, so a refusal (the person said no, a wrong client, a scope not granted) is audited like
any refused call; then it goes back to the Mailboxes page, which says what happened. No token, code or verifier
is logged or put in a URL of Oaken's.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from apps.console.views import current_membership
from apps.core.callers import Caller
from apps.core.errors import OakenError
from apps.core.kinds import Door
from apps.core.links import public_origin
from apps.gate.dispatch import dispatch
from apps.mail.oauth import flow
from apps.mail.oauth.providers import provider as find_provider

PAGE = "/mailboxes"
# marks the page's notices about connecting by OAuth (Django's messages framework carries them across the redirect)
TAG = "mail-oauth"


def _back(request: HttpRequest, text: str, *, ok: bool = False) -> HttpResponse:
    (messages.success if ok else messages.error)(request, text, extra_tags=TAG)
    return redirect(PAGE)


@login_required
@require_POST
def start(request: HttpRequest) -> HttpResponse:
    """A POST under the CSRF check, answered with the provider's address for the page to go to: a GET any site could
    link to would start a flow in a signed-in victim's browser, connecting their mailbox into whichever tenant their
    console is in (one the linker may read). (A form cannot post on to the provider: the console's policy keeps forms
    to Oaken, redirects included; the page navigates to the address instead.)"""
    request.session.pop("mail_oauth_grant", None)  # a new flow: an address asked for an older one is not
    membership = current_membership(request)
    provider = find_provider(request.POST.get("provider", ""))
    if membership is None or provider is None:
        refused = {"code": "NOT_FOUND", "message": "This provider is not enabled here.", "field": "provider"}
        return JsonResponse({"error": refused}, status=404)
    url = flow.begin(
        provider,
        user_id=str(request.user.pk),
        tenant_id=str(membership.tenant_id),
        redirect_uri=public_origin(request) + flow.CALLBACK_PATH,
        account_id=request.POST.get("account_id", "")[:64],
    )
    response = JsonResponse({"url": url})
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_GET
def callback(request: HttpRequest) -> HttpResponse:
    membership = current_membership(request)
    state = flow.take_state(request.GET.get("state", ""))
    if (
        membership is None
        or state is None
        or state.get("user") != str(request.user.pk)
        or state.get("tenant") != str(membership.tenant_id)
    ):
        return _back(request, "This connection was not started here, was already used or has expired: connect again.")
    provider = find_provider(str(state.get("provider", "")))
    if provider is None:
        return _back(request, "This provider is not enabled here.")
    grant = flow.finish(
        provider, state, code=request.GET.get("code", ""), error=request.GET.get("error", ""), now=timezone.now()
    )
    handle = flow.keep_grant(grant, user_id=str(request.user.pk), tenant_id=str(membership.tenant_id))
    caller = Caller.person(membership)
    try:
        out: dict[str, Any] = dispatch(caller, Door.UI, "connect_mailbox_oauth", {"grant": handle}).output
    except OakenError as error:
        if error.field == "email_address":
            request.session["mail_oauth_grant"] = handle  # the page asks the person for the address
            return _back(request, f"{provider.label} does not say the mailbox's address: enter it below.")
        flow.drop_grant(handle)
        return _back(request, f"{provider.label}: {error.message}")
    return _back(request, f"Connected {out['email_address']} with {provider.label}; its mail is syncing.", ok=True)
