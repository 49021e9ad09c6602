"""The authorization server's pages and documents: consent, discovery metadata, open client registration."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from csp.decorators import csp_replace
from django import forms
from django.conf import settings
from django.core import signing
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.utils.decorators import method_decorator
from oauth2_provider import views as dot
from oauth2_provider.exceptions import OAuthToolkitError
from oauth2_provider.forms import AllowForm
from oauth2_provider.models import Application
from oauth2_provider.views.dynamic_client_registration import (
    DynamicClientRegistrationManagementView,
    DynamicClientRegistrationView,
)
from oauthlib.oauth2.rfc6749.errors import CustomOAuth2Error, InvalidRequestError

from apps.core.bounds import bounds
from apps.core.callers import Caller
from apps.core.clients import client_address
from apps.core.errors import OakenError
from apps.core.kinds import Door, Scope, recorded_scopes
from apps.core.links import api_resource, mcp_resource, public_origin
from apps.core.redis_client import count_hit
from apps.gate import payload
from apps.gate.dispatch import dispatch
from apps.oauth.cimd import DocumentRefused, client_for_document, names_a_document
from apps.oauth.redirects import MAX_CLIENT_NAME_LENGTH, MAX_REDIRECT_URIS, redirect_uri_problem
from apps.oauth.resource import INVALID_TARGET, canonical_resources
from apps.workspaces.models import Membership, Workspace
from apps.workspaces.selectors import SESSION_TENANT_KEY, NotAMemberError, access_membership

LIFETIMES = (("24h", "24 hours"), ("until_revoked", "Until I revoke it"))


# what the client asked for, as the consent page saw it validated: the hidden fields come back from the browser,
# so the POST takes these from the seal, never from the fields (editing `scope` must not widen the grant)
_SEALED = ("client_id", "redirect_uri", "scope", "resource", "state", "response_type", "code_challenge",
           "code_challenge_method")  # fmt: skip
_SEAL_SALT = "oaken.oauth.consent"


def _seal(request: HttpRequest, values: dict[str, Any]) -> str:
    claim = {key: values.get(key) or "" for key in _SEALED}
    return signing.dumps({**claim, "user": str(request.user.pk)}, salt=_SEAL_SALT, compress=True)


def _unseal(request: HttpRequest, seal: str) -> dict[str, str] | None:
    """What the page's GET sealed, for this person, if it is intact and recent; else None."""
    if len(seal) > 4000:
        return None
    try:
        claim = signing.loads(seal, salt=_SEAL_SALT, max_age=settings.OAUTH_CONSENT_MAX_AGE_SECONDS)
    except (signing.BadSignature, ValueError, TypeError):
        return None
    if not isinstance(claim, dict) or claim.get("user") != str(request.user.pk):
        return None
    return {key: str(claim.get(key) or "") for key in _SEALED}


class ConsentForm(AllowForm):
    """The toolkit's hidden fields (what the client asked for) plus what the person ticks here. The seal binds
    what the client asked for; clean() puts it in place of the hidden fields."""

    grant_write = forms.BooleanField(required=False, label=Scope.WRITE.label)
    grant_send = forms.BooleanField(required=False, label=Scope.SEND.label)
    all_workspaces = forms.BooleanField(required=False, label="Every workspace, also ones made later")
    workspaces = forms.MultipleChoiceField(required=False, choices=(), widget=forms.CheckboxSelectMultiple)
    lifetime = forms.ChoiceField(choices=LIFETIMES, initial="24h", widget=forms.RadioSelect)
    # the named set of tools the connection is limited to ('': none); the choices are the person's (list_tool_sets),
    # and grant_connection checks the one chosen again
    tool_set = forms.ChoiceField(
        required=False,
        choices=(),
        label="Tool set",
        # Django's own words quote the value sent; ours never echo it
        error_messages={"invalid_choice": "Pick one of the tool sets listed."},
    )
    # the tenant the page showed: the grant goes there or nowhere, whatever the session says by the time of POST
    tenant = forms.UUIDField(widget=forms.HiddenInput())
    seal = forms.CharField(widget=forms.HiddenInput(), required=False)  # missing or bad: refused in form_valid
    forged = False

    def __init__(
        self,
        *args: Any,
        workspace_names: list[str],
        limited: bool,
        request: HttpRequest,
        tool_sets: list[tuple[str, str]],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.request = request
        self.fields["workspaces"].choices = [(name, name) for name in workspace_names]
        self.fields["tool_set"].choices = [("", "None: every tool the permissions above allow"), *tool_sets]
        if limited:  # a MEMBER given some workspaces: "every" is every one of theirs, now and later
            self.fields["all_workspaces"].label = "Every workspace given to you, also ones given later"

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        sealed = _unseal(self.request, data.get("seal") or "")
        # no intact seal of this person's, or another client or return address than the page showed: refused
        # (form_valid); any other field (scope, resource, state, PKCE) is simply the seal's
        self.forged = sealed is None or any(data.get(key) != sealed[key] for key in ("client_id", "redirect_uri"))
        if sealed is not None:
            data.update(sealed)
        if data.get("allow") and not data.get("all_workspaces") and not data.get("workspaces"):
            raise forms.ValidationError("Pick at least one workspace, or every workspace.")
        return data


def _with_issuer(uri: str, issuer: str) -> str:
    """`uri` with the one `iss` parameter naming this server (any the client's URI carried is dropped)."""
    parts = urlsplit(uri)
    query = [(key, value) for key, value in parse_qsl(parts.query, keep_blank_values=True) if key != "iss"]
    return urlunsplit(parts._replace(query=urlencode([*query, ("iss", issuer)])))


# Allow and Deny send the person on to the client's redirect URI (any registered scheme), and Chromium holds
# that redirect to form-action: on this page alone the directive is lifted. Its form posts to itself all the same.
@method_decorator(csp_replace({"form-action": None}), name="dispatch")
class ConsentView(dot.AuthorizationView):
    """The consent screen (SPEC §7). What is granted is decided here, on the server: the scopes the client
    asked for intersected with what the person ticked (Read always), the workspaces they picked, a lifetime.
    The grant itself is the `grant_connection` operation, so it passes the gate and is audited."""

    template_name = "oauth/consent.html"
    form_class = ConsentForm

    def validate_authorization_request(self, request: HttpRequest) -> tuple[list[str], dict[str, Any]]:
        """The toolkit's checks, and PKCE S256 only: `plain` (or no method, which means plain) is refused before
        the page renders, not after the person clicked Allow."""
        scopes, credentials = super().validate_authorization_request(request)
        if credentials.get("code_challenge_method") != "S256":
            error = InvalidRequestError(
                description='PKCE code_challenge_method must be "S256"', state=credentials.get("state")
            )
            raise OAuthToolkitError(error=error, redirect_uri=credentials["redirect_uri"])
        # RFC 8707: another server's resource is refused now, to the client (the redirect URI is checked by
        # now, RFC 6749 §4.1.2.1), not after the person clicked Allow
        if canonical_resources(request.GET.getlist("resource"), public_origin(request)) is None:
            target = CustomOAuth2Error(
                error="invalid_target", description=INVALID_TARGET, state=credentials.get("state")
            )
            raise OAuthToolkitError(error=target, redirect_uri=credentials["redirect_uri"])
        return scopes, credentials

    def error_response(self, error: OAuthToolkitError, application: Any, **kwargs: Any) -> HttpResponse:
        """An error sent back to the client names this server as its issuer, as a success does (RFC 9207 §2)."""
        response = super().error_response(error, application, **kwargs)
        if response.status_code == 302:
            response["Location"] = _with_issuer(response["Location"], public_origin(self.request))
        return response

    def _membership(self) -> Membership:
        """GET: the tenant chosen in the console (else the first). POST: the tenant the page showed, which the
        person must still belong to (NotAMemberError otherwise)."""
        if self.request.method == "POST":
            return access_membership(user=self.request.user, tenant_id=self.request.POST.get("tenant") or "-")
        try:
            return access_membership(user=self.request.user, tenant_id=self.request.session.get(SESSION_TENANT_KEY))
        except NotAMemberError:
            return access_membership(user=self.request.user)

    def _workspace_names(self) -> list[str]:
        """The workspaces the person may grant: those they reach (a connection never reaches further than its
        person, whatever it lists: apps.core.callers)."""
        membership = self._membership()
        names = Workspace.objects.for_tenant(membership.tenant).order_by("name").values_list("name", flat=True)
        given = membership.workspace_names()
        return [name for name in names if given is None or name in given]

    def _tool_sets(self) -> list[tuple[str, str]]:
        """The tool sets the person may limit the connection to, as list_tool_sets gives them (name, words)."""
        listed = dispatch(Caller.person(self._membership()), Door.UI, "list_tool_sets", {}).output["tool_sets"]
        return [(s["name"], f"{s['name']}: {s['description']}" if s["built_in"] else s["name"]) for s in listed]

    def get_form_kwargs(self) -> dict[str, Any]:
        limited = self._membership().limited
        names = self._workspace_names()
        return {
            **super().get_form_kwargs(),
            "workspace_names": names,
            "limited": limited,
            "request": self.request,
            "tool_sets": self._tool_sets(),
        }

    def get_initial(self) -> dict[str, Any]:
        names = self._workspace_names()
        default = ["default"] if "default" in names else names[:1]
        tenant = self._membership().tenant.pk
        initial = super().get_initial()
        seal = _seal(self.request, initial) if self.request.method == "GET" else None
        return {**initial, "workspaces": default, "lifetime": "24h", "tenant": tenant, "seal": seal}

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        form = context["form"]
        if "application" not in context:  # the page shown again after a form error: the client is the form's
            context["application"] = Application.objects.filter(client_id=form["client_id"].value() or "-").first()
        # what the client asked for: the seal's (a POST shown again), else the request just validated (a GET)
        sealed = _unseal(self.request, form["seal"].value() or "") if form.is_bound else None
        requested = set((sealed["scope"] if sealed else form["scope"].value() or "").split())
        application = context.get("application")
        described = application is not None and application.registration_source == Application.RegistrationSource.CIMD
        context.update(
            # a client named by its metadata document: the host publishing that document is who vouches for it
            vouched_by=urlsplit(application.client_id).netloc if described else "",
            requested_write="write" in requested,
            requested_send="send" in requested,
            redirect_host=urlsplit(form["redirect_uri"].value() or "").netloc,
            tenant=self._membership().tenant,
        )
        return context

    def _refuse(self, error: str, description: str, status: int = 400) -> HttpResponse:
        return self.render_to_response({"error": {"error": error, "description": description}}, status=status)

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        # a client may not skip the consent screen (approval_prompt=auto would reuse an earlier grant)
        if "approval_prompt" in request.GET:
            query = request.GET.copy()
            query.pop("approval_prompt")
            request.GET = query  # type: ignore[assignment]
        try:
            self._membership()
        except NotAMemberError:
            return self._refuse("no_tenant", "You are not a member of any tenant.", 200)
        client_id = request.GET.get("client_id") or ""
        if names_a_document(client_id):  # a client ID metadata document: fetched now unless a fresh one is held
            try:
                client_for_document(client_id, client=client_address(request), now=timezone.now())
            except DocumentRefused as refusal:  # the client is not known: nothing goes back to its redirect URI
                return self._refuse(refusal.error, refusal.description, refusal.status)
        return super().get(request, *args, **kwargs)

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            self._membership()
        except NotAMemberError:
            return self._refuse("no_tenant", "You are no longer a member of the tenant this page showed.")
        return super().post(request, *args, **kwargs)

    def form_valid(self, form: ConsentForm) -> HttpResponse:
        data = form.cleaned_data
        # the hidden fields came back from the browser: nothing is redirected anywhere not registered
        app = Application.objects.filter(client_id=data["client_id"]).first()
        if form.forged or app is None or not app.redirect_uri_allowed(data["redirect_uri"]):
            return self._refuse("invalid_request", "This authorization request is not valid or expired: start again.")
        if not data.get("allow"):
            return super().form_valid(form)  # the toolkit answers the client with access_denied
        requested = set(data["scope"].split())  # the seal's: what the client asked for, never more
        ticked = {name for name in ("write", "send") if data.get(f"grant_{name}")}
        granted = recorded_scopes(requested & ticked)
        resources = canonical_resources((data.get("resource") or "").split(), public_origin(self.request))
        if resources is None:  # refused before the page (validate_authorization_request); kept as a last check
            error = CustomOAuth2Error(error="invalid_target", description=INVALID_TARGET, state=data.get("state"))
            return self.error_response(OAuthToolkitError(error=error, redirect_uri=data["redirect_uri"]), app)
        try:
            connection = dispatch(
                Caller.person(self._membership()),
                Door.UI,
                "grant_connection",
                {
                    "client_id": data["client_id"],
                    "redirect_uri": data["redirect_uri"],
                    "scopes": granted,
                    "workspaces": [] if data.get("all_workspaces") else list(data.get("workspaces") or []),
                    "lifetime": data["lifetime"],
                    "tool_set": data.get("tool_set") or None,
                },
                confirm=True,
            ).output
        except OakenError as refusal:
            form.add_error(None, refusal.message)
            return self.form_invalid(form)
        credentials = {
            "client_id": data["client_id"],
            "redirect_uri": data["redirect_uri"],
            "response_type": data.get("response_type"),
            "state": data.get("state"),
            "code_challenge": data.get("code_challenge") or None,
            "code_challenge_method": data.get("code_challenge_method") or None,
            "resource": resources,
            "oaken_connection": connection["id"],
        }
        try:
            uri, _headers, _body, _status = self.create_authorization_response(
                request=self.request, scopes=" ".join(granted), credentials=credentials, allow=True
            )
        except OAuthToolkitError as error:
            return self.error_response(error, app)
        return self.redirect(uri, app)


class ServerMetadataView(dot.OAuthServerMetadataView):
    """RFC 8414, with client ID metadata documents advertised when Oaken takes them (apps.oauth.cimd; the
    toolkit's own CIMD, which its view would advertise, stays off)."""

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = super().get(request, *args, **kwargs)
        document = json.loads(response.content)
        document["client_id_metadata_document_supported"] = bool(settings.OAUTH_CLIENT_DOCUMENTS)
        answer = JsonResponse(document)
        answer["Access-Control-Allow-Origin"] = "*"
        return answer


class ProtectedResourceMetadataView(dot.OAuthProtectedResourceMetadataView):
    """RFC 9728: both the root and the /mcp-suffixed documents describe the MCP endpoint, /mcp."""

    def get_resource(self, request: HttpRequest) -> str:
        return mcp_resource(request)


class ApiResourceMetadataView(dot.OAuthProtectedResourceMetadataView):
    """RFC 9728: the /api/v1-suffixed document describes the REST API, a resource of its own (apps.oauth.resource)."""

    def get_resource(self, request: HttpRequest) -> str:
        return api_resource(request)


class OpenRegistration:
    """Dynamic client registration is open to MCP clients (they register before anyone signs in), limited per
    client address and hour; registrations never used are forgotten by `oauth.forget_unused_clients`."""

    def has_permission(self, request: HttpRequest) -> bool:
        return True


class RegistrationView(DynamicClientRegistrationView):
    """RFC 7591 registration: rate-limited, redirect URIs checked, authorization code only."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if len(request.body) > 20_000:
            return _registration_error("invalid_client_metadata", "the registration is too large", 400)
        try:
            count = count_hit(f"oauth-registrations:{client_address(request)}", 3600)
            everyone = count_hit("oauth-registrations-all", 3600)
        except redis.RedisError:
            return _registration_error("temporarily_unavailable", "registration is unavailable, retry later", 503)
        if count > bounds.OAUTH_REGISTRATIONS_PER_HOUR or everyone > bounds.OAUTH_REGISTRATIONS_ALL_PER_HOUR:
            response = _registration_error("rate_limited", "too many registrations, retry later", 429)
            response["Retry-After"] = "3600"
            return response
        try:
            # the doors' one parser (no NaN, no key named twice, UTF-8): what the toolkit then reads leniently is
            # strict JSON whose every field was checked here
            metadata = payload.loads(request.body)
        except (ValueError, RecursionError, OakenError):
            return _registration_error("invalid_client_metadata", "the registration is not strict JSON", 400)
        if isinstance(metadata, dict):
            uris = metadata.get("redirect_uris")
            name = metadata.get("client_name", "")
            if not isinstance(name, str) or len(name) > MAX_CLIENT_NAME_LENGTH:
                return _registration_error("invalid_client_metadata", "client_name is at most 200 characters", 400)
            if isinstance(uris, list) and len(uris) > MAX_REDIRECT_URIS:
                return _registration_error("invalid_redirect_uri", "at most 10 redirect URIs", 400)
            if isinstance(uris, list):
                for uri in uris:
                    problem = redirect_uri_problem(uri) if isinstance(uri, str) else "redirect URIs are strings"
                    if problem:
                        return _registration_error("invalid_redirect_uri", problem, 400)
            grants = metadata.get("grant_types", ["authorization_code"])
            if isinstance(grants, list) and set(grants) - {"authorization_code", "refresh_token"}:
                return _registration_error("invalid_client_metadata", "only authorization_code is offered", 400)
        return super().post(request, *args, **kwargs)


def _registration_error(error: str, description: str, status: int) -> JsonResponse:
    return JsonResponse({"error": error, "error_description": description}, status=status)


class TokenView(dot.TokenView):
    """The toolkit's token endpoint; errors raised while storing tokens (a code redeemed twice at once, another
    resource) come back without a content type, so every answer is marked JSON and never cached."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = super().post(request, *args, **kwargs)
        response["Content-Type"] = "application/json"
        response["Cache-Control"] = "no-store"
        return response


class RegistrationManagementView(DynamicClientRegistrationManagementView):
    """RFC 7592: a client may read its registration, never change or delete it (a change would skip the
    redirect-URI policy above; a deletion would erase the connections people see in the console)."""

    def put(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return _registration_error("invalid_request", "registrations cannot be changed; register anew", 405)

    def delete(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return _registration_error("invalid_request", "registrations cannot be deleted here", 405)
