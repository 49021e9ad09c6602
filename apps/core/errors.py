"""The one domain error: raised by any layer, mapped once per door into one shape (a stable code, a human
message, and details where they help)."""

from __future__ import annotations

from typing import Any

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
