"""What every `oaken` command shares: JSON out, one error shape with a stable code, and the way through the gate."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any, NoReturn

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from apps.core.callers import Caller
from apps.core.errors import OakenError, error_body
from apps.core.kinds import Door
from apps.gate import waiting
from apps.gate.dispatch import Result, dispatch
from apps.operations.registry import registry

if TYPE_CHECKING:
    from apps.workspaces.models import Membership


class JsonCommand(BaseCommand):
    """A command that prints one JSON document: the result (exit 0) or {"error": {...}} (exit 1)."""

    @staticmethod
    def add_person_arguments(parser: CommandParser, who: str = "the person's e-mail address") -> None:
        """--user and --tenant: the person a command acts as, in which of their tenants (see membership())."""
        parser.add_argument("--user", required=True, help=who)
        parser.add_argument("--tenant", help="tenant id (default: the person's first tenant)")

    def emit(self, payload: Any) -> None:
        self.stdout.write(json.dumps(payload, default=str, sort_keys=True))

    def fail(self, code: str, message: str, field: str | None = None) -> NoReturn:
        self.emit(error_body(OakenError(code, message, field=field)))
        sys.exit(1)

    def membership(self, email: str, tenant_id: str | None) -> Membership:
        """The named person's membership (in tenant_id, or their first tenant), or a NOT_FOUND exit."""
        from apps.accounts.models import User
        from apps.workspaces.selectors import NotAMemberError, access_membership

        user = User.objects.for_email(email).first()
        if user is None or not user.is_active:
            self.fail("NOT_FOUND", "no such person", "user")
        try:
            return access_membership(user=user, tenant_id=tenant_id)
        except NotAMemberError:
            self.fail("NOT_FOUND", "no such tenant for this person", "tenant")

    def call(
        self,
        membership: Membership,
        operation: str,
        data: Any,
        *,
        confirm: bool = False,
        idempotency_key: str | None = None,
    ) -> None:
        """Call `operation` as this person through the cli door; print its output, or its refusal and exit 1.
        A waiting operation (wait_for_message) waits here, on this thread (apps.gate.waiting)."""
        start, since = timezone.now(), time.monotonic()

        def once() -> Result:
            return dispatch(
                Caller.person(membership),
                Door.CLI,
                operation,
                data,
                confirm=confirm,
                idempotency_key=idempotency_key,
                began=start,
            )

        try:
            result = waiting.settle({}, registry.get(operation), once(), once, since=since, start=start)
        except OakenError as error:
            self.emit(error_body(error))
            raise SystemExit(1) from None
        self.emit(result.output)
