"""The OpenAPI document's request side: every bound the gate holds a call to, from the same source as the gate.

An operation's request body is its input model's JSON Schema in validation mode with the operation's bounds
(settings.OPERATIONS) applied (apps.operations.schema), one component per operation: two operations sharing an
input model may have different bounds. The parameters every operation path takes (the Idempotency-Key header, the
Oaken-Tenant header, ?confirm) carry the bounds the door and the gate check them against.

GET /api/schema: the document, made once per process (SchemaView).

drf-spectacular makes the document anew on every request (0.2-0.3 s of CPU and 0.7 MB on a quiet machine, more
under load): a public page that slow is a cheap way to burn the web workers' CPU, and it kept Swagger UI waiting.
What the document says is fixed when the process starts (the registry is filled at start-up, plugins included,
and the URL patterns are made from it then) and it depends on no one who asks, so it is made on the first request
and kept. A version or a language asked for (drf-spectacular's `version` and `lang`) gets a document of its own."""

from __future__ import annotations

import re
import threading
from typing import Any

from django.conf import settings
from django.utils import translation
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.utils import OpenApiParameter
from drf_spectacular.views import SpectacularAPIView
from jsonschema import Draft202012Validator
from rest_framework.request import Request
from rest_framework.response import Response

from apps.core.ids import IDEMPOTENCY_KEY_MAX_CHARS, IDEMPOTENCY_KEY_PATTERN
from apps.operations.registry import Callers, Ceiling, OpClass, Operation
from apps.operations.schema import input_json_schema

TENANT_HEADER = "Oaken-Tenant"
# nested models of a request body, in validation mode: named apart from the same models in responses, which
# drf-spectacular's pydantic extension writes in serialization mode
_NESTED = "{model}Request"


class OperationInput:
    """`extend_schema(request=...)` for one operation: its bounded input schema (see OperationInputExtension)."""

    def __init__(self, op: Operation) -> None:
        self.op = op


class OperationInputExtension(OpenApiSerializerExtension):
    target_class = OperationInput

    def get_name(self, auto_schema: Any, direction: str) -> str:
        # the door adds "Request" (COMPONENT_SPLIT_REQUEST): list_messages -> ListMessagesInRequest
        words = re.split(r"[._]", self.target.op.name)
        return "".join(word.title() for word in words) + "In"

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        template = "#/components/schemas/" + _NESTED
        schema = storable(input_json_schema(self.target.op, ref_template=template))
        for name, nested in schema.pop("$defs", {}).items():
            named = _NESTED.format(model=name)
            auto_schema.registry.register_on_missing(
                ResolvedComponent(name=named, type=ResolvedComponent.SCHEMA, object=named, schema=nested)
            )
        return schema


def body_required_when_empty_refused(result: dict[str, Any], **_: Any) -> dict[str, Any]:
    """drf-spectacular requires a request body only when its schema names a required property; an input that
    refuses {} another way (one field of two, as search's query or view_id) needs its body too, since the door reads
    no body as {}. A postprocessing hook (SPECTACULAR_SETTINGS)."""
    components = result.get("components", {})
    for path in result.get("paths", {}).values():
        for operation in path.values():
            body = operation.get("requestBody") if isinstance(operation, dict) else None
            if not body or body.get("required"):
                continue
            schema = body.get("content", {}).get("application/json", {}).get("schema")
            if schema and not Draft202012Validator({**schema, "components": components}).is_valid({}):
                body["required"] = True
    return result


# The gate refuses a text holding NUL anywhere in the input, before the model sees it (apps.gate.payload: no text
# column can store it); a lone surrogate cannot be sent in UTF-8 at all, only escaped, and is refused the same way.
NO_NUL = "^[^\\u0000]*$"


def storable(schema: Any) -> Any:
    """`schema` with every text held to NO_NUL: as its pattern, or beside a pattern of its own (an enum or a const
    names no text with NUL already)."""
    if isinstance(schema, list):
        return [storable(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    walked = {key: storable(value) if key != "default" else value for key, value in schema.items()}
    if walked.get("type") == "object" and walked.get("additionalProperties") not in (None, False):
        walked["propertyNames"] = {"pattern": NO_NUL}  # a free-form object's names are text too
    if walked.get("type") == "string" and not {"enum", "const"} & set(walked):
        if "pattern" not in walked:
            walked["pattern"] = NO_NUL
        elif walked["pattern"] != NO_NUL and re.search(walked["pattern"], "a\x00") is not None:
            walked["allOf"] = [*walked.get("allOf", []), {"pattern": NO_NUL}]
    return walked


IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    {
        "type": "string",
        "minLength": 1,
        "maxLength": IDEMPOTENCY_KEY_MAX_CHARS,
        "pattern": IDEMPOTENCY_KEY_PATTERN,
    },
    OpenApiParameter.HEADER,
    description="replays the first response of a call that completed with this key and input (a refused call "
    "binds nothing); printable ASCII, not starting or ending with a space",
)
TENANT = OpenApiParameter(
    TENANT_HEADER,
    {"type": "string", "format": "uuid"},
    OpenApiParameter.HEADER,
    description="tenant id (default: the one chosen in the console, else your first); a tenant you are not in "
    "is not found. A bearer credential's tenant is its own: naming another is not found",
)
CONFIRM = OpenApiParameter(
    "confirm",
    bool,
    OpenApiParameter.QUERY,
    description="a person (session): I asked for exactly this change (true; false is no). An agent cannot "
    "confirm: it sends confirmation_token instead",
)
CONFIRMATION_TOKEN_PARAMETER = "confirmation_token"  # noqa: S105 (a parameter's name, not a secret)
CONFIRMATION_TOKEN = OpenApiParameter(
    CONFIRMATION_TOKEN_PARAMETER,
    {"type": "string", "minLength": 1, "maxLength": 200},
    OpenApiParameter.QUERY,
    description="an agent (bearer): the token of the proposal a CONFIRMATION_REQUIRED answer carried, to repeat "
    "the same call (the same body) once it was shown to the user; single-use, bound to the operation, the input "
    "and the credential",
)

# who may call an operation over the network (x-oaken-callers): a person by session; an agent by an API key or an
# OAuth token, within the operation's ceiling (a person-bound operation: OAuth tokens only, SPEC §7)
PERSON, API_KEY, OAUTH = "person", "api_key", "oauth"
SESSION_SCHEME, BEARER_SCHEME = "cookieAuth", "bearer"


def callers(op: Operation) -> list[str]:
    """Who may call `op` through the REST door at all (the tenant's exposure settings and each credential's
    scopes, workspaces and allow-list narrow it further, call by call)."""
    if not bearer_may_call(op):
        return [PERSON]
    return [PERSON, OAUTH] if op.person_bound else [PERSON, API_KEY, OAUTH]


def bearer_may_call(op: Operation) -> bool:
    """Whether any agent could ever be offered `op`: one any principal may call, under a ceiling above never."""
    return op.callers == Callers.ANY and op.ceiling != Ceiling.NEVER


def security(op: Operation) -> list[dict[str, list[str]]]:
    """The operation's OpenAPI security: the session alone for what only persons may call, else either."""
    session: dict[str, list[str]] = {SESSION_SCHEME: []}
    return [{BEARER_SCHEME: []}, session] if bearer_may_call(op) else [session]


def parameters(op: Operation) -> list[OpenApiParameter]:
    """What an operation's path takes beside its body: a key only where the gate accepts one, a confirmation
    token only where an agent could be asked for one."""
    accepted = not op.returns_secret and not op.commits_in_batches
    token = op.op_class == OpClass.MUTATE and bearer_may_call(op)
    return [*([IDEMPOTENCY_KEY] if accepted else []), TENANT, CONFIRM, *([CONFIRMATION_TOKEN] if token else [])]


# documents kept per (URL patterns, version, language); a handful at most, each made once
_documents: dict[tuple[str, str | None, str | None], dict[str, Any]] = {}
_making = threading.Lock()


class SchemaView(SpectacularAPIView):
    """SpectacularAPIView whose document is made once per process and kept."""

    def _get_schema_response(self, request: Request) -> Response:
        version = self.api_version or request.version or self._get_version_parameter(request)
        # the URL patterns in use are part of the key: a test that swaps them (override_settings) gets its own
        key = (str(self.urlconf or settings.ROOT_URLCONF), version, translation.get_language())
        document = _documents.get(key)
        if document is None:
            with _making:  # one thread makes it; the others wait for it rather than making it again
                document = _documents.get(key)
                if document is None:
                    generator = self.generator_class(urlconf=self.urlconf, api_version=version, patterns=self.patterns)
                    document = generator.get_schema(request=request, public=self.serve_public)
                    _documents[key] = document
        return Response(
            data=document,
            headers={"Content-Disposition": f'inline; filename="{self._get_filename(request, version)}"'},
        )
