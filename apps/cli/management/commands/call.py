"""`oaken call OP --user EMAIL [--tenant ID] [--input JSON] [--confirm] [--idempotency-key K]`: the cli door."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from apps.cli.command import JsonCommand
from apps.core.errors import OakenError
from apps.gate import payload


class Command(JsonCommand):
    help = "Call an operation as a person, through the gate."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("operation")
        self.add_person_arguments(parser)
        parser.add_argument("--input", default="{}", help="the input as a JSON object")
        parser.add_argument("--confirm", action="store_true", help="I asked for exactly this change")
        parser.add_argument("--idempotency-key")

    def handle(self, *args: Any, **options: Any) -> None:
        membership = self.membership(options["user"], options["tenant"])
        try:
            # the doors' one parser: strict JSON (no repeated key, no NaN), bounded as every door bounds a body
            raw = payload.loads(options["input"])
        except OakenError as refused:  # more objects or items than any operation takes
            self.fail(refused.code, refused.message, "input")
        except (ValueError, RecursionError):
            self.fail("INVALID_INPUT", "input is not valid JSON", "input")
        self.call(
            membership,
            options["operation"],
            raw,
            confirm=options["confirm"],
            idempotency_key=options["idempotency_key"],
        )
