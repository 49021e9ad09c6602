"""Running `oaken` commands in tests: exit code and what they printed."""

from __future__ import annotations

import io
import json
from typing import Any

from django.core.management import call_command


def run(*args: str) -> tuple[int, str]:
    """(exit code, stdout) of one `oaken` command."""
    out = io.StringIO()
    try:
        call_command(*args, stdout=out)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue()


def run_json(*args: str) -> tuple[int, Any]:
    """(exit code, the JSON document printed) of one `oaken` command."""
    code, out = run(*args)
    return code, json.loads(out)
