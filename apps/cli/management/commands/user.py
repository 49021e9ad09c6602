"""`oaken user create --email E --password P [--tenant NAME]`"""

from __future__ import annotations

import sys
from typing import Any

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import CommandParser
from django.core.validators import validate_email

from apps.cli.command import JsonCommand
from apps.workspaces.services import PersonExistsError, create_person


class Command(JsonCommand):
    help = "Manage people."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="Create a person with their own tenant and default workspace.")
        create.add_argument("--email", required=True)
        password = create.add_mutually_exclusive_group(required=True)
        password.add_argument("--password")
        password.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
        create.add_argument("--tenant", help="tenant name (default: the e-mail address)")

    def handle(self, *args: Any, **options: Any) -> None:
        email = options["email"].strip()
        password = sys.stdin.readline().rstrip("\n") if options["password_stdin"] else options["password"]
        try:
            validate_email(email)
        except ValidationError:
            self.fail("INVALID_INPUT", "email is not a valid e-mail address", "email")
        try:
            validate_password(password)
        except ValidationError as exc:
            self.fail("INVALID_INPUT", "password: " + " ".join(exc.messages), "password")
        try:
            person = create_person(email=email, password=password, tenant_name=options["tenant"])
        except PersonExistsError:
            self.fail("CONFLICT", "a person with this e-mail address already exists", "email")
        self.emit(
            {
                "user_id": str(person.user.pk),
                "email": person.user.email,
                "tenant_id": str(person.tenant.pk),
                "tenant": person.tenant.name,
                "workspace_id": str(person.workspace.pk),
                "workspace": person.workspace.name,
                "role": person.membership.role,
            }
        )
