"""The REST door: POST /api/v1/ops/<name> per operation, GET /api/v1/ops, OpenAPI 3.1.

Two kinds of caller come through it (apps.api.authentication): the console's person, by session + CSRF, on the
`ui` door, and an agent, by a bearer API key or OAuth token, on the `api` door, held to exactly the rules of
/mcp (exposure, scopes, workspaces, confirmation by proposal and token, its credential's requests a minute).
A door only translates: it authenticates, builds the Caller, hands the JSON body to `dispatch`, and renders the
Result or the OakenError.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from django.http import HttpResponse
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularSwaggerSplitView
from pydantic import BaseModel, ConfigDict
from rest_framework import exceptions as drf_exceptions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.agents.bearer import rate_limited
from apps.api import schema
from apps.api.authentication import CredentialRefused, challenge
from apps.api.parsers import UnreadBodyParser
from apps.core import uploads
from apps.core.bounds import bounds
from apps.core.callers import Caller
from apps.core.errors import OakenError, error_response, wrong_method_response
from apps.core.kinds import Door
from apps.gate import payload, waiting
from apps.gate.dispatch import Result, dispatch
from apps.gate.preflight import may_call
from apps.operations.exposure import offered_operations
from apps.operations.registry import Operation, registry
from apps.workspaces.selectors import SESSION_TENANT_KEY, NotAMemberError, access_membership

TENANT_HEADER = schema.TENANT_HEADER


class ErrorBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: str
    message: str
    field: str | None = None
    missing_scope: str | None = None
    retry_after: int | None = None
    proposal: dict[str, Any] | None = None


class ErrorOut(BaseModel):
    model_config = ConfigDict(extra="forbid")
    error: ErrorBody


def refused(error: OakenError, caller: Caller | None = None, request: Request | None = None) -> HttpResponse:
    """A refusal in the one error shape (apps.core.errors), with 413 for a body refused by its size; an OAuth
    caller missing a scope also gets RFC 6750's insufficient_scope challenge naming the scopes to ask for."""
    headers: dict[str, str] = {}
    if error.missing_scope and caller is not None and caller.credential_kind == "oauth" and request is not None:
        wanted = " ".join(sorted(caller.scopes | {error.missing_scope}))
        headers["WWW-Authenticate"] = challenge(request._request, "insufficient_scope", scope=wanted)
    return error_response(error, 413 if isinstance(error, payload.BodyTooLargeError) else None, headers)


def exception_handler(exc: Exception, context: dict[str, Any]) -> HttpResponse | None:
    """DRF's own refusals (authentication, CSRF, parsing) in the one error shape; a 401 (and a request with two
    credentials) says, in WWW-Authenticate, how to authenticate with a bearer credential."""
    if isinstance(exc, OakenError):
        return refused(exc)
    request = context.get("request")
    if isinstance(exc, CredentialRefused):
        how = challenge(request._request if request is not None else None, exc.challenge)
        return error_response(exc.error, None, {"WWW-Authenticate": how})
    if isinstance(exc, drf_exceptions.NotAuthenticated | drf_exceptions.AuthenticationFailed):
        how = challenge(request._request if request is not None else None)
        unauthenticated = OakenError("UNAUTHENTICATED", "sign in first, or send an API key or OAuth token as Bearer")
        return error_response(unauthenticated, None, {"WWW-Authenticate": how})
    if isinstance(exc, drf_exceptions.PermissionDenied):
        return refused(OakenError("FORBIDDEN", "this request was refused (CSRF or permission)"))
    if isinstance(exc, drf_exceptions.ParseError | drf_exceptions.UnsupportedMediaType):
        return refused(OakenError.invalid("", "the body must be a JSON object"))
    if isinstance(exc, drf_exceptions.MethodNotAllowed):
        return wrong_method_response()
    return None


def person_caller(request: Request) -> Caller:
    """The signed-in person in the tenant the request names, else the one chosen in the console, else their first.

    A tenant they no longer belong to is refused (NOT_FOUND), never swapped for another one
    behind their back: the console drops a stale choice when it next renders a page.
    """
    tenant_id = request.headers.get(TENANT_HEADER)
    if tenant_id is None:
        tenant_id = request.session.get(SESSION_TENANT_KEY)
    try:
        membership = access_membership(user=request.user, tenant_id=tenant_id)
    except NotAMemberError:
        raise OakenError.not_found("tenant") from None
    return Caller.person(membership)


def caller_of(request: Request) -> tuple[Caller, Door]:
    """Who calls, through which door: the agent of a bearer credential (`api`), else the signed-in person (`ui`).

    An agent's tenant is its credential's: an Oaken-Tenant header naming another is not found, as for a person
    naming a tenant they are not in. Each credential's requests a minute are counted over /mcp and this door
    together (apps.agents.bearer.rate_limited), before anything else is done for it."""
    if not isinstance(request.auth, Caller):
        return person_caller(request), Door.UI
    caller = request.auth
    named = request.headers.get(TENANT_HEADER)
    if named is not None and not _names(named, caller.tenant.pk):
        raise OakenError.not_found("tenant")
    wait = rate_limited(caller)
    if wait is not None:
        raise OakenError("RATE_LIMITED", "too many requests for this credential", retry_after=wait)
    return caller, Door.API


def _names(text: str, tenant_id: uuid.UUID) -> bool:
    try:
        return uuid.UUID(text) == tenant_id
    except ValueError:
        return False


# what an operation's path may answer besides its output: the one error shape (413: a body over
# OPERATION_BODY_MAX_BYTES, refused before it is parsed)
_ERRORS = {status: ErrorOut for status in (400, 401, 403, 404, 409, 413, 422, 429, 503)}


def operation_view(op: Operation) -> Any:
    """A view for one operation, so the OpenAPI document has one path per operation."""

    class OperationView(APIView):
        @extend_schema(
            operation_id=op.name,
            summary=op.summary,
            description=op.description,
            request=schema.OperationInput(op),
            responses={200: op.output_model, **_ERRORS},
            parameters=schema.parameters(op),
            tags=[op.op_class.value],
            # security requirement objects, as drf-spectacular uses them (its annotation says names)
            auth=schema.security(op),  # type: ignore[arg-type]
            extensions={"x-oaken-callers": schema.callers(op)},
        )
        def post(self, request: Request) -> HttpResponse:
            return call_operation(request, op.name)

    OperationView.__name__ = OperationView.__qualname__ = f"{op.name.title().replace('_', '')}View"
    return OperationView.as_view()


def call_operation(request: Request, name: str) -> HttpResponse:
    """Dispatch one call of `name` with the JSON body, and render its output or its OakenError.

    A person confirms with ?confirm=true; an agent repeats the same call (the same body) with
    ?confirmation_token=<the proposal's token>. Each is the gate's to weigh for its own principal (it ignores the
    other), as the MCP door passes an agent's token."""
    try:
        caller, door = caller_of(request)
    except OakenError as error:
        return refused(error)
    if not isinstance(request.data, dict):
        return refused(OakenError.invalid("", "the body must be a JSON object"))
    start, since, data = waiting.began(request.META), time.monotonic(), dict(request.data)

    def call() -> Result | HttpResponse:
        try:
            return dispatch(
                caller,
                door,
                name,
                data,
                confirm=request.query_params.get("confirm") in {"1", "true", "yes"},
                confirmation_token=request.query_params.get(schema.CONFIRMATION_TOKEN_PARAMETER) or None,
                idempotency_key=request.headers.get("Idempotency-Key"),
                began=start,
            )
        except OakenError as error:
            return refused(error, caller, request)

    result = waiting.settle(request.META, registry.get(name), call(), call, since=since, start=start)
    if isinstance(result, HttpResponse):
        return result
    response = Response(result.output)
    if result.replayed:
        response["Idempotent-Replayed"] = "true"
    return response


class UnknownOperationView(APIView):
    """Any other name under /api/v1/ops/: the gate answers it (NOT_AVAILABLE, audited) in the one error shape,
    instead of Django's HTML 404."""

    @extend_schema(exclude=True)
    def post(self, request: Request, name: str) -> HttpResponse:
        return call_operation(request, name)


_UPLOAD_FIELDS = ("filename", "workspace", "workspace_id", "account_name")


class ImportUploadView(APIView):
    """POST /api/v1/imports/upload?filename=…[&workspace_id=…][&account_name=…]: the body is the file itself (an
    mbox, an .eml or a zip of them). The door only carries it: it spools the bytes to disk, stopping as soon as
    they pass IMPORT_UPLOAD_MAX_BYTES (before reading any when the request's Content-Length says so already, or
    when the person may not call upload_import at all, as the operation list would say),
    and calls the operation upload_import with the size it counted and the stored file's token; the operation
    decides (the bound included), and the answer is the operation's, in the one error shape."""

    parser_classes = [UnreadBodyParser]  # the body is never parsed: it is read as a stream, once

    @extend_schema(exclude=True)
    def post(self, request: Request) -> HttpResponse:
        try:
            caller, door = caller_of(request)
        except OakenError as error:
            return refused(error)
        fields = {name: request.query_params[name] for name in _UPLOAD_FIELDS if name in request.query_params}
        limit = int(bounds.IMPORT_UPLOAD_MAX_BYTES)
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        token: str | None = None
        if declared > limit or not may_call(caller, door, "upload_import"):
            size = declared  # refused (by the gate, audited) without reading a byte of it
        else:
            try:
                token, size = uploads.spool(request._request, limit)
            except uploads.UploadTooLargeError as too_large:
                size = too_large.size
        data: dict[str, Any] = {**fields, "size": size}
        if token is not None:
            data["upload"] = token
        try:
            result = dispatch(caller, door, "upload_import", data)
        except OakenError as error:
            if token is not None:
                uploads.discard(token)
            response = refused(error)
            if error.code == "LIMIT_EXCEEDED" and error.field == "size":
                response.status_code = 413
            return response
        return Response(result.output)


class OperationRow(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    summary: str
    op_class: str
    needs_role: str


class OperationList(BaseModel):
    model_config = ConfigDict(extra="forbid")
    operations: list[OperationRow]


class OperationListView(APIView):
    @extend_schema(
        operation_id="list_operations",
        summary="What you may call here.",
        parameters=[schema.TENANT],
        # 400 for a session and a bearer credential at once, 401 without a credential (or a bad one), 404 for a
        # tenant the caller is not in, 429 for a credential past its requests a minute, 503 while the database is away
        responses={200: OperationList, **{status: ErrorOut for status in (400, 401, 404, 429, 503)}},
    )
    def get(self, request: Request) -> HttpResponse:
        try:
            caller, door = caller_of(request)
        except OakenError as error:
            return refused(error)
        rows = [
            {"name": op.name, "summary": op.summary, "op_class": op.op_class.value, "needs_role": op.role}
            for op in offered_operations(caller, door=door)
        ]
        return Response({"operations": rows})


class ApiDocsView(SpectacularSwaggerSplitView):
    """Swagger UI for the OpenAPI document, fit for the strict CSP: its files come from drf-spectacular-sidecar,
    its start-up script is this same page asked for with ?script (never inline), its few rules a style sheet."""

    template_name = "api/docs.html"

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        response: Response = super().get(request, *args, **kwargs)
        if request.GET.get("script") is None:
            response.data["schema_path"] = reverse("schema")
        return response
