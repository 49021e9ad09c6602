"""Console pages: server-rendered shells whose actions call the operations over the REST door.

Each page loads one small script module (static/console/pages/<page>.js) on top of the shared
static/console/lib.js. The views here only choose the tenant, render pages and serve the static files;
what a page shows and changes comes from the operations, the same ones the API documents.
Two views do more. Accepting an invitation: its person is not yet a member of the tenant, so the view calls
the operation accept_invitation there itself, as a person without a role. And a message's HTML part
(message_html): a document of its own for a sandboxed frame, under its own policy, which no JSON answer can
be; it calls the operation get_message_html through the gate for the signed-in person, as the REST door would.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import os
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import redis
from csp.constants import SELF
from csp.decorators import csp_exempt, csp_update
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.staticfiles import finders
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotModified
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.accounts import services as account_services
from apps.audit import chainfile
from apps.console import assets
from apps.core.bounds import bounds
from apps.core.callers import Caller
from apps.core.clients import client_address
from apps.core.errors import OakenError
from apps.core.kinds import Door, Principal, Role, Scope
from apps.core.links import MCP_PATH, public_origin
from apps.core.redis_client import count_hit
from apps.gate.dispatch import dispatch
from apps.gate.preflight import may_call
from apps.mail.selectors import reached_in_words
from apps.operations.registry import registry
from apps.workspaces.models import Invitation, Membership
from apps.workspaces.selectors import (
    SESSION_INVITATION_KEY,
    SESSION_TENANT_KEY,
    InvitationRefusedError,
    NotAMemberError,
    access_invitation_by_token,
    access_membership,
    invitation_reference,
    open_invitation_by_token,
)
from apps.workspaces.services import ROLE_IN_A_SENTENCE

if TYPE_CHECKING:
    from apps.accounts.models import User


def current_membership(request: HttpRequest) -> Membership | None:
    """The membership the console acts in: the tenant chosen in this session while it is still theirs, else the first.

    A choice that no longer holds (the person was removed) is dropped here, so the page and the
    API calls it makes agree on the tenant.
    """
    # asked by the view and by the navigation of the same page: one lookup per request
    known = getattr(request, "_oaken_membership", _UNKNOWN)
    if known is not _UNKNOWN:
        return known  # type: ignore[return-value]
    request._oaken_membership = found = _membership(request)  # type: ignore[attr-defined]
    return found


_UNKNOWN = object()


def _membership(request: HttpRequest) -> Membership | None:
    user: User = request.user  # type: ignore[assignment]
    chosen = request.session.get(SESSION_TENANT_KEY)
    if chosen is not None:
        try:
            return access_membership(user=user, tenant_id=chosen)
        except NotAMemberError:
            del request.session[SESSION_TENANT_KEY]
    try:
        return access_membership(user=user)
    except NotAMemberError:
        return None


def allowed_operations(membership: Membership | None) -> frozenset[str]:
    """The operations the gate would let the person through to from the console (apps.gate.preflight): a page
    offers a button, and says what it shows, only by these, never by a role (the operation decides, as ever, when
    it is called)."""
    if membership is None:
        return frozenset()
    caller = Caller.person(membership)
    return frozenset(op.name for op in registry if may_call(caller, Door.UI, op.name))


# what a page calls each scope (the one spelling, Scope.label), by its value
SCOPE_LABELS = {scope.value: scope.label for scope in Scope}


def _shell(request: HttpRequest, name: str, **extra: Any) -> HttpResponse:
    """The page's shell for the tenant the console acts in, with the operations the person's role reaches and
    `extra` of the page's own."""
    membership = current_membership(request)
    return render(
        request,
        f"console/{name}.html",
        {
            "membership": membership,
            "allowed_ops": allowed_operations(membership),
            "scope_labels": SCOPE_LABELS,
            **extra,
        },
    )


@login_required
def page(request: HttpRequest, name: str) -> HttpResponse:
    """A console page: a shell whose script module lists and changes things through the operations."""
    return _shell(request, name)


@login_required
def import_page(request: HttpRequest) -> HttpResponse:
    """Uploading a mail file to import (upload_import) and following its import (get_import, list_imports)."""
    return _shell(request, "import", max_upload_bytes=bounds.IMPORT_UPLOAD_MAX_BYTES)


# the folder the mailbox showed last in this browser, per tenant (set by its script: account id, "/", folder, each
# URI-encoded); read here only to choose the first list, which the operation then checks like any input
LAST_LISTING_COOKIE = "oaken_mail_last_{tenant}"
# whether the list shows conversations (the default) or messages, per tenant in this browser (set by its script)
LIST_VIEW_COOKIE = "oaken_mail_view_{tenant}"


def _asked_listing(
    request: HttpRequest, membership: Membership, account_id: str | None = None, folder: str | None = None
) -> tuple[str, str] | None:
    """The listing the page opens on: the one its address names (/mail/<account>/<folder>, or ?account=&folder=),
    else the last one shown."""
    if account_id is not None:
        return account_id, folder or "inbox"
    account = request.GET.get("account")
    if account is not None:
        return account, request.GET.get("folder") or "inbox"
    last = request.COOKIES.get(LAST_LISTING_COOKIE.format(tenant=membership.tenant_id), "")
    account, slash, folder = last.partition("/")
    return (unquote(account), unquote(folder) or "inbox") if slash and account else None


def list_view(request: HttpRequest, membership: Membership) -> str:
    """ "messages" when the person chose the list of messages in this browser, else "conversations"."""
    chosen = request.COOKIES.get(LIST_VIEW_COOKIE.format(tenant=membership.tenant_id))
    return "messages" if chosen == "messages" else "conversations"


def first_screen(
    request: HttpRequest,
    membership: Membership,
    *,
    account_id: str | None = None,
    folder: str | None = None,
    thread_id: str | None = None,
) -> dict[str, Any] | None:
    """What the mailbox shows first, read before the page is sent, so it renders without waiting for three calls
    of its own: the operations its script would call first (list_accounts, list_labels, then list_conversations
    or list_messages of the listing it opens on, and get_thread when the address names a conversation), each
    through the gate for the signed-in person, as the REST door calls them (audited, limited, refused alike).
    Anything refused is left out, and the script asks again and shows the refusal as ever.
    """
    caller = Caller.person(membership)
    try:
        accounts = dispatch(caller, Door.UI, "list_accounts", {}).output
        labels = dispatch(caller, Door.UI, "list_labels", {}).output
    except OakenError:
        return None
    view = list_view(request, membership)
    screen: dict[str, Any] = {"accounts": accounts, "labels": labels, "listing": None, "view": view, "thread": None}
    if not accounts["accounts"]:
        return screen
    account, folder = _asked_listing(request, membership, account_id, folder) or (
        accounts["accounts"][0]["id"],
        "inbox",
    )
    operation = "list_conversations" if view == "conversations" else "list_messages"
    try:
        listed = dispatch(caller, Door.UI, operation, {"account_id": account, "folder": folder}).output
        screen["listing"] = {"account_id": account, "folder": folder, "view": view, "page": listed}
    except OakenError:
        pass
    if thread_id is not None:
        with contextlib.suppress(OakenError):  # the script asks again and says why
            screen["thread"] = dispatch(caller, Door.UI, "get_thread", {"thread_id": thread_id}).output
    return screen


@login_required
@csp_update({"frame-src": [SELF]})  # a message's HTML part shows in a frame of Oaken's own (message_html)
def mail(
    request: HttpRequest, account_id: str | None = None, folder: str | None = None, thread_id: str | None = None
) -> HttpResponse:
    """The mailbox: accounts and folders, the list (conversations or messages), search, and a conversation with its
    messages; its first screen comes with the page (first_screen). Its addresses: /mail, /mail/<account>/<folder>
    (a folder's name may hold "/") and /mail/t/<thread> (a conversation), each the same page, so that Back,
    Forward and reload show what the address names."""
    membership = current_membership(request)  # asked once per request: _shell's is the same
    screen = (
        first_screen(request, membership, account_id=account_id, folder=folder, thread_id=thread_id)
        if membership
        else None
    )
    return _shell(
        request, "mail", first_screen=screen, poll_seconds=settings.MAIL_POLL_SECONDS, standard_folders=_STANDARD
    )


# a mailbox's standard folders as the side lists them first (mail.js's ORDER and FOLDER_NAMES)
_STANDARD = ("Inbox", "Drafts", "Sent", "Archive", "Spam", "Trash")


# The frame's own policy: no script, no request but (when asked for) remote images, inline styles of the mail
# (its one place that has them: the document holds nothing else), and the frame sandboxed again by this header.
_FRAME_POLICY = (
    "default-src 'none'; img-src {images}; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'self'; sandbox allow-popups allow-popups-to-escape-sandbox"
)
_FRAME = (
    '<!doctype html><html><head><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
    "<title>Message</title></head><body>{html}</body></html>"
)


@login_required
@require_GET
@xframe_options_sameorigin
@csp_exempt()  # type: ignore[arg-type]  # (django-csp types a view as taking the request alone)
def message_html(request: HttpRequest, message_id: str) -> HttpResponse:
    """A message's HTML part as a document for the mailbox's sandboxed frame: the operation get_message_html,
    called for the signed-in person as the REST door would, shown under a policy that runs no script; remote
    images load only when the person asked for them (?remote_images=1)."""
    membership = current_membership(request)
    if membership is None:
        raise Http404
    remote = request.GET.get("remote_images") == "1"
    try:
        result = dispatch(
            Caller.person(membership),
            Door.UI,
            "get_message_html",
            {"message_id": message_id, "remote_images": remote},
        )
    except OakenError as error:
        return HttpResponse(error.message, status=error.http_status, content_type="text/plain; charset=utf-8")
    response = HttpResponse(_FRAME.format(html=result.output["html"]), content_type="text/html; charset=utf-8")
    response["Content-Security-Policy"] = _FRAME_POLICY.format(images="http: https:" if remote else "'none'")
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"
    return response


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The console's home: what needs the person now (its script asks the operations), the three steps to start
    for a new tenant with a client configuration naming this server's /mcp, and the tenants they belong to."""
    if current_membership(request) is None:  # none left: the page that says so and offers a tenant of their own
        return redirect("new-tenant")
    memberships = Membership.objects.for_user(request.user).select_related("tenant").order_by("created_at")  # type: ignore[arg-type]
    mcp_url = public_origin(request) + MCP_PATH
    client_config = json.dumps({"mcpServers": {"oaken": {"url": mcp_url}}}, indent=2)
    return render(
        request,
        "console/home.html",
        {
            "memberships": memberships,
            "membership": current_membership(request),
            "mcp_url": mcp_url,
            "client_config": client_config,
        },
    )


@login_required
@require_POST
def switch_tenant(request: HttpRequest) -> HttpResponse:
    """Act in another of the person's tenants from now on (and open there after the next sign-in)."""
    try:
        membership = access_membership(user=request.user, tenant_id=request.POST.get("tenant_id", ""))  # type: ignore[arg-type]
    except NotAMemberError:
        return render(request, "console/no_such_tenant.html", status=404)
    request.session[SESSION_TENANT_KEY] = str(membership.tenant_id)
    account_services.remember_tenant(user=request.user, tenant_id=membership.tenant_id, now=timezone.now())  # type: ignore[arg-type]
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = reverse("console")
    return redirect(target)


_REFUSED_STATUS = {"unknown": 404, "wrong_person": 403, "unverified": 403}


def _invitation_page(request: HttpRequest, template: str, row: Invitation, **extra: Any) -> HttpResponse:
    """An invitation shown: who sent it (their address), to which tenant, as which role and what it allows."""
    role = Role(row.role)
    context = {
        "invitation": row,
        "inviter": row.invited_by.email if row.invited_by is not None else "",
        "role": role.label,
        "role_sentence": ROLE_IN_A_SENTENCE[role],
        **extra,
    }
    return _private(render(request, template, context))


def _private(response: HttpResponse) -> HttpResponse:
    """A page whose address holds an invitation's token: never kept by a cache, never sent on as a referrer."""
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"
    return response


INVITATION_PAGE_KEY = "invitation-page:client:"


@require_GET
def _invitation_for_stranger(request: HttpRequest, token: str) -> HttpResponse:
    """An invitation link opened by someone not signed in: who invited them to which tenant, with which role, and
    nothing more; a wrong, expired, used or cancelled link is one general answer. A good one leaves a signed
    reference to the invitation (never the token) in the session, for the sign-up or sign-in that follows."""
    try:
        seen = count_hit(INVITATION_PAGE_KEY + client_address(request), bounds.INVITATION_PAGE_WINDOW_SECONDS)
    except redis.RedisError:  # nothing can be counted, so nothing is looked up
        seen = bounds.INVITATION_PAGE_PER_CLIENT + 1
    if seen > bounds.INVITATION_PAGE_PER_CLIENT:
        return _private(render(request, "console/invitation_busy.html", status=429))
    row = open_invitation_by_token(token=token, now=timezone.now())
    if row is None:
        request.session.pop(SESSION_INVITATION_KEY, None)
        return _private(render(request, "console/invitation_unusable.html", status=404))
    request.session[SESSION_INVITATION_KEY] = invitation_reference(row.pk)
    return _invitation_page(request, "console/invitation_welcome.html", row)


@require_http_methods(["GET", "POST"])
def invitation(request: HttpRequest, token: str) -> HttpResponse:
    """An invitation link: for someone not signed in, what it invites to (_invitation_for_stranger); for a signed-in
    person, GET shows it to the person it was sent to, POST accepts it (once) through the gate, as the operation
    accept_invitation called in the invitation's tenant, where the person is not yet a member."""
    if not request.user.is_authenticated:
        return _invitation_for_stranger(request, token)
    user: User = request.user
    try:
        row = access_invitation_by_token(user=user, token=token, now=timezone.now())
        if request.method == "POST":
            caller = Caller(Principal.PERSON, row.tenant, user=user)  # no role there yet: the operation needs none
            try:
                accepted = dispatch(caller, Door.UI, "accept_invitation", {"token": token}).output
            except OakenError:
                # taken, cancelled or expired since it was read: reading it again says which
                access_invitation_by_token(user=user, token=token, now=timezone.now())
                raise
            request.session[SESSION_TENANT_KEY] = str(row.tenant_id)
            return _private(
                render(
                    request,
                    "console/invitation_accepted.html",
                    {
                        "tenant": row.tenant,
                        "role": Role(accepted["role"]).label,
                        "already_member": accepted["already_member"],
                    },
                )
            )
    except InvitationRefusedError as refused:
        status = _REFUSED_STATUS.get(refused.reason, 410)
        return _private(render(request, "console/invitation_refused.html", {"reason": refused.reason}, status=status))
    reach = reached_in_words(tenant=row.tenant, who="You", role=row.role, workspace_ids=row.workspace_ids)
    return _invitation_page(request, "console/invitation.html", row, reach_sentence=reach)


# what may be served from the static folders, and as what; anything else is a 404
_STATIC_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


_COMPRESSED = {".js", ".css", ".svg"}


@functools.lru_cache(maxsize=64)
def _gzip(path: str, etag: str) -> bytes:
    """The file at `path` gzipped, once per process and version of the file (`etag` names it)."""
    with open(path, "rb") as file:
        return gzip.compress(file.read(), compresslevel=9, mtime=0)


def asset(request: HttpRequest, path: str, version: str | None = None) -> HttpResponse:
    """A static file (the console's, the favicon, the API docs' from drf-spectacular-sidecar), for servers that
    do not serve /static/ themselves (gunicorn); under /assets/<version>/ the console's own, kept for good by a
    browser while the version is the current one (apps.console.assets)."""
    suffix = PurePosixPath(path).suffix
    if suffix not in _STATIC_TYPES or any(part in {"", ".", ".."} for part in path.split("/")):
        raise Http404
    found = finders.find(path)
    if not found or isinstance(found, list):
        raise Http404
    # "no-cache" keeps a changed file from being used stale; the validator makes asking again cheap: a page's
    # shell, styles and script modules come back as a 304 while they have not changed
    stat = os.stat(found)
    # a style sheet or script goes gzipped to a browser that takes it (a third of the bytes), under its own ETag
    gzipped = suffix in _COMPRESSED and "gzip" in request.headers.get("Accept-Encoding", "")
    etag = f'"{stat.st_mtime_ns:x}-{stat.st_size:x}{"-gz" if gzipped else ""}"'
    response: HttpResponse
    if etag in {tag.strip() for tag in request.headers.get("If-None-Match", "").split(",")}:
        response = HttpResponseNotModified()
    elif gzipped:
        response = HttpResponse(_gzip(found, etag), content_type=_STATIC_TYPES[suffix])
        response["Content-Encoding"] = "gzip"
    else:
        with open(found, "rb") as file:
            response = HttpResponse(file.read(), content_type=_STATIC_TYPES[suffix])
    response["ETag"] = etag
    if suffix in _COMPRESSED:
        response["Vary"] = "Accept-Encoding"
    current = version is not None and version == assets.version()
    response["Cache-Control"] = "public, max-age=31536000, immutable" if current else "no-cache"
    return response


@require_GET
def audit_verifier(request: HttpRequest) -> HttpResponse:
    """The offline verifier of an exported audit chain (apps/audit/chainfile.py, standard library only), as a file to
    save: `python3 verifier.py audit.jsonl`. Served to anyone, signed in or not: it is the code the chain is hashed
    with and holds no secret, and whoever checks an export should not need an account to get it."""
    with open(chainfile.__file__, "rb") as file:
        response = HttpResponse(file.read(), content_type="text/x-python; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="verifier.py"'
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "no-cache"
    return response
