"""`oaken user create --email E --password P [--tenant NAME] [--send-confirmation]`"""

from __future__ import annotations

import sys
from typing import Any

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import CommandParser
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone

from apps.accounts import mail
from apps.cli.command import JsonCommand
from apps.workspaces.services import PersonExistsError, create_person


class Command(JsonCommand):
    help = "Manage people."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser(
            "create",
            help="Create a person with their own tenant and default workspace.",
            description="Create a person with their own tenant and default workspace. The operator vouches for "
            "the address: it is marked confirmed, so the person can sign in at once. With --send-confirmation it "
            "stays unconfirmed and the person is mailed the link that confirms it (as at sign-up).",
        )
        create.add_argument("--email", required=True)
        password = create.add_mutually_exclusive_group(required=True)
        password.add_argument("--password")
        password.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
        create.add_argument("--tenant", help="tenant name (default: the e-mail address)")
        create.add_argument(
            "--send-confirmation",
            action="store_true",
            help="leave the address unconfirmed and mail the person the link that confirms it "
            "(default: the address is marked confirmed, the operator vouching for it)",
        )

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
            with transaction.atomic():  # a confirmation that cannot be mailed leaves no person behind
                person = create_person(email=email, password=password, tenant_name=options["tenant"])
                user = person.user
                if options["send_confirmation"]:
                    # outside a request, the link starts with OAKEN_PUBLIC_URL (or where `oaken serve` listens)
                    mail.send(user.email, *mail.verification(user))
                else:
                    user.email_verified_at = timezone.now()
                    user.save(update_fields=["email_verified_at"])
        except PersonExistsError:
            self.fail("CONFLICT", "a person with this e-mail address already exists", "email")
        except OSError:  # smtplib's errors are OSErrors
            self.fail("SERVICE_UNAVAILABLE", "the confirmation mail could not be sent; nobody was created", "email")
        self.emit(
            {
                "user_id": str(person.user.pk),
                "email": person.user.email,
                "email_confirmed": user.email_verified_at is not None,
                "tenant_id": str(person.tenant.pk),
                "tenant": person.tenant.name,
                "workspace_id": str(person.workspace.pk),
                "workspace": person.workspace.name,
                "role": person.membership.role,
            }
        )
