"""What every `oaken` command shares: JSON out, and one error shape with a stable code."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

from django.core.management.base import BaseCommand


class JsonCommand(BaseCommand):
    """A command that prints one JSON document: the result (exit 0) or {"error": {...}} (exit 1)."""

    def emit(self, payload: Any) -> None:
        self.stdout.write(json.dumps(payload, default=str, sort_keys=True))

    def fail(self, code: str, message: str, field: str | None = None) -> NoReturn:
        error: dict[str, str] = {"code": code, "message": message}
        if field is not None:
            error["field"] = field
        self.stdout.write(json.dumps({"error": error}, sort_keys=True))
        sys.exit(1)
