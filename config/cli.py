"""The `oaken` command: Django management commands, with the embedded servers made ready first."""

from __future__ import annotations

import json
import os
import sys


def main(argv: list[str] | None = None) -> None:
    """Run `oaken <command> ...`; command names may be spelled with hyphens (import-mail)."""
    args = list(sys.argv if argv is None else argv)
    if len(args) > 1 and not args[1].startswith("-"):
        args[1] = args[1].replace("-", "_")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from config import embedded

    if len(args) > 1 and args[1] not in {"help", "--help", "-h", "version", "--version"}:
        try:
            embedded.ensure_environment()
        except embedded.EmbeddedServerAway as away:
            from apps.core.errors import OakenError, error_body

            print(json.dumps(error_body(OakenError("SERVICE_UNAVAILABLE", str(away)))))
            sys.exit(1)
    from django.core.management import execute_from_command_line

    execute_from_command_line(args)


if __name__ == "__main__":  # `python -m config.cli <command>`: how `oaken serve` starts its own children
    main()
