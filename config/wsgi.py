"""WSGI entry point for the web server (gunicorn).

The MCP door's requests go through a Django handler of their own, with only the middleware an MCP answer needs
(settings.MCP_MIDDLEWARE: its security headers, the public origin, CORS, the ALLOWED_HOSTS check); sessions, CSRF,
the signed-in person and messages serve browser pages, and /mcp takes a bearer credential and nothing else (its
view is CSRF-exempt, reads no session and sets no cookie). Passing through them cost every tool call ~0.1 ms.
Everything else, the URLs included, is the same: the same URLconf, the same view, the same gate.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# the web's bounds on PostgreSQL (statement, lock and idle-in-transaction timeouts: config/settings/database.py)
os.environ.setdefault("OAKEN_ROLE", "web")

_everything = get_wsgi_application()  # sets Django up: what follows may read settings and import the apps

from django.conf import settings  # noqa: E402
from django.core.exceptions import ImproperlyConfigured  # noqa: E402
from django.core.handlers.wsgi import WSGIHandler  # noqa: E402

from apps.core.links import MCP_PATH  # noqa: E402

# the paths the MCP endpoint answers at (config.urls), as WSGI's PATH_INFO gives them
MCP_PATHS = frozenset({MCP_PATH, MCP_PATH + "/"})


class DoorHandler(WSGIHandler):
    """Django's WSGI handler with a middleware list of its own: some of settings.MIDDLEWARE, in its order (a door
    may leave out what it does not need, never add or reorder)."""

    def __init__(self, middleware: list[str]) -> None:
        remaining = iter(settings.MIDDLEWARE)
        if not all(name in remaining for name in middleware):  # each found after the one before it
            raise ImproperlyConfigured("a door's middleware must be some of settings.MIDDLEWARE, in its order")
        self.middleware = middleware
        super().__init__()

    def load_middleware(self, is_async: bool = False) -> None:
        # Django builds the chain from settings.MIDDLEWARE: this handler's list stands in for it while it does,
        # once, when the process starts
        everything = settings.MIDDLEWARE
        settings.MIDDLEWARE = self.middleware
        try:
            super().load_middleware(is_async)
        finally:
            settings.MIDDLEWARE = everything


class Doors:
    """One application: /mcp through the MCP door's handler, every other path through the whole middleware."""

    def __init__(self, everything: WSGIHandler, mcp: WSGIHandler) -> None:
        self.everything, self.mcp = everything, mcp

    def handler_for(self, path: str | None) -> WSGIHandler:
        return self.mcp if path in MCP_PATHS else self.everything

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        return self.handler_for(environ.get("PATH_INFO"))(environ, start_response)


application = Doors(_everything, DoorHandler(settings.MCP_MIDDLEWARE))
