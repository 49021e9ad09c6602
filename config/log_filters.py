"""What the logs may show of a request's address: some addresses carry a single-use token (an address
confirmation, a password reset, an invitation), and any query may carry what a person typed. The web server's log
(config.web_worker) and Django's own request log (`Bad Request: /path`, through the settings' handler) both show an
address through `unquoted`."""

from __future__ import annotations

import logging
import re

# the addresses whose tail is a single-use token (apps.people_pages.urls, apps.console.urls)
_TOKEN_ADDRESS = re.compile(r"^(/accounts/verify/|/accounts/password-reset/(?!sent$|done$)|/invitations/)[^?#]+")


def unquoted(uri: str) -> str:
    """A request's address as a log may show it: the query and any token left out."""
    path, question, _ = uri.partition("?")
    return _TOKEN_ADDRESS.sub(r"\1…", path) + ("?…" if question else "")


class Addresses(logging.Filter):
    """A log record's arguments that are request addresses, shown through `unquoted` (Django's request loggers
    pass the path as an argument: "%s: %s" % (reason, path))."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.name.startswith("django."):
            record.args = tuple(unquoted(a) if isinstance(a, str) and a.startswith("/") else a for a in record.args)
        return True
