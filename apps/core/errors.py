"""The one domain error: raised by any layer, mapped once per door into one shape (a stable code, a human
message, and details where they help)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.http import HttpResponse

# The fixed wording for anything not offered to an agent: identical whether the operation is
# switched off, can never be offered, or does not exist, so nothing can be learned from it.
NOT_AVAILABLE_MESSAGE = "This operation is not available."

# a door answers a wrong HTTP method with this status, an Allow header naming POST, and wrong_method()
WRONG_METHOD_STATUS = 405
WRONG_METHOD_MESSAGE = "method not allowed: send a POST"

HTTP_STATUS = {
    "INVALID_INPUT": 400,
    "UNAUTHENTICATED": 401,
    "INSUFFICIENT_SCOPE": 403,
    "FORBIDDEN": 403,
    "OUT_OF_SCOPE": 403,
    "NOT_AVAILABLE": 404,
    "NOT_FOUND": 404,
    "CONFIRMATION_REQUIRED": 409,
    "CONFIRMATION_INVALID": 409,
    "CONFLICT": 409,
    # a feed cursor older than the feed's retention: the events after it are gone (the message says from where to
    # read on)
    "CURSOR_EXPIRED": 410,
    "LAST_OWNER": 409,
    "LIMIT_EXCEEDED": 422,
    "IDEMPOTENCY_MISMATCH": 422,
    "RATE_LIMITED": 429,
    "INTERNAL_ERROR": 500,
    # a plugin's process raised, crashed, answered wrongly or not in time (only the exception's type is told)
    "PLUGIN_FAILED": 502,
    "SERVICE_UNAVAILABLE": 503,
}


class OakenError(Exception):
    """A refusal or failure, with a stable code. Messages never quote submitted values or mail text."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        field: str | None = None,
        missing_scope: str | None = None,
        retry_after: int | None = None,
        proposal: dict[str, Any] | None = None,
        record: Callable[[], None] | None = None,
    ) -> None:
        if code not in HTTP_STATUS:
            raise ValueError(f"unknown error code {code}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.missing_scope = missing_scope
        self.retry_after = retry_after
        self.proposal = proposal
        # what the refusal itself writes (a budget found spent, SPEC §22): the gate runs it in the transaction of
        # the refusal's audit event, after whatever the call had begun rolled back; never part of the answer
        self.record = record

    @property
    def http_status(self) -> int:
        return HTTP_STATUS[self.code]

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"code": self.code, "message": self.message}
        for key in ("field", "missing_scope", "retry_after", "proposal"):
            value = getattr(self, key)
            if value is not None:
                data[key] = value
        return data

    @classmethod
    def not_available(cls) -> OakenError:
        return cls("NOT_AVAILABLE", NOT_AVAILABLE_MESSAGE)

    @classmethod
    def not_found(cls, field: str) -> OakenError:
        return cls("NOT_FOUND", f"{field}: no such item", field=field)

    @classmethod
    def invalid(cls, field: str, message: str) -> OakenError:
        return cls("INVALID_INPUT", f"{field}: {message}" if field else message, field=field or None)

    @classmethod
    def wrong_method(cls) -> OakenError:
        """A request with any HTTP method but POST, answered alike by every door (with status 405 and Allow)."""
        return cls.invalid("", WRONG_METHOD_MESSAGE)


def error_body(error: OakenError) -> dict[str, Any]:
    """The one error shape, as every door answers it: {"error": {"code", "message", and the details it has}}."""
    return {"error": error.as_dict()}


def error_response(error: OakenError, status: int | None = None, headers: dict[str, str] | None = None) -> HttpResponse:
    """The one error shape as an HTTP answer, the same bytes from every JSON door (compact UTF-8 JSON): with the
    error's own status unless the door's differs (413 for a body refused by size), Retry-After when the error
    says how long to wait, and `headers` of the door's own (Allow, Cache-Control, WWW-Authenticate)."""
    body = json.dumps(error_body(error), ensure_ascii=False, separators=(",", ":"))
    response = HttpResponse(body.encode(), status=status or error.http_status, content_type="application/json")
    if error.retry_after is not None:
        response["Retry-After"] = str(error.retry_after)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def wrong_method_response(headers: dict[str, str] | None = None) -> HttpResponse:
    """A wrong HTTP method, answered alike by every door: 405, Allow naming POST, and wrong_method()'s error."""
    return error_response(OakenError.wrong_method(), WRONG_METHOD_STATUS, {"Allow": "POST", **(headers or {})})
