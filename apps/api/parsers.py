"""The REST door's JSON bodies: bounded like the MCP door's (apps.gate.payload), where DRF's own JSONParser reads
any size and parses any shape.

Not a JSONParser: DRF hands a JSONParser the whole body read through Django's `request.body`, under
DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB) and before this parser's own bound (its CSRF check asks for the form data
first), and a larger body was answered with Django's HTML 400 page; any other parser reads the request's stream,
with the operation doors' bound (OPERATION_BODY_MAX_BYTES)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser

from apps.gate import payload


class BoundedJSONParser(BaseParser):
    media_type = "application/json"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        request = (parser_context or {}).get("request")
        body = payload.read_body(stream, request.META if request is not None else {})
        try:
            return payload.loads(body)
        except (ValueError, RecursionError):
            raise ParseError("the body is not JSON") from None


class UnreadBodyParser(BaseParser):
    """For a view that reads the body itself, as a stream (the import upload): DRF's CSRF check asks for the
    form data, and this answers it without reading a byte."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        return {}
