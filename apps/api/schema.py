"""GET /api/schema: the OpenAPI document, made once per process.

drf-spectacular makes the document anew on every request (0.2-0.3 s of CPU and 0.7 MB on a quiet machine, more
under load): a public page that slow is a cheap way to burn the web workers' CPU, and it kept Swagger UI waiting.
What the document says is fixed when the process starts (the registry is filled at start-up, plugins included,
and the URL patterns are made from it then) and it depends on no one who asks, so it is made on the first request
and kept. A version or a language asked for (drf-spectacular's `version` and `lang`) gets a document of its own."""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings
from django.utils import translation
from drf_spectacular.views import SpectacularAPIView
from rest_framework.request import Request
from rest_framework.response import Response

# documents kept per (URL patterns, version, language); a handful at most, each made once
_documents: dict[tuple[str, str | None, str | None], dict[str, Any]] = {}
_making = threading.Lock()


class SchemaView(SpectacularAPIView):
    """SpectacularAPIView whose document is made once per process and kept."""

    def _get_schema_response(self, request: Request) -> Response:
        version = self.api_version or request.version or self._get_version_parameter(request)
        # the URL patterns in use are part of the key: a test that swaps them (override_settings) gets its own
        key = (str(self.urlconf or settings.ROOT_URLCONF), version, translation.get_language())
        document = _documents.get(key)
        if document is None:
            with _making:  # one thread makes it; the others wait for it rather than making it again
                document = _documents.get(key)
                if document is None:
                    generator = self.generator_class(urlconf=self.urlconf, api_version=version, patterns=self.patterns)
                    document = generator.get_schema(request=request, public=self.serve_public)
                    _documents[key] = document
        return Response(
            data=document,
            headers={"Content-Disposition": f'inline; filename="{self._get_filename(request, version)}"'},
        )
