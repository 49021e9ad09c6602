"""The REST door (DRF) and its OpenAPI 3.1 document (drf-spectacular)."""

from __future__ import annotations

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # a bearer credential first: a request with an Authorization header is never taken for the session's
        "apps.api.authentication.BearerAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["apps.api.parsers.BoundedJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "apps.api.views.exception_handler",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Oaken API",
    "DESCRIPTION": "Every operation of the registry, one path each; the console uses exactly this API with its "
    "session, and an agent with an API key or an OAuth token as Bearer (docs/rest.md). Each operation's "
    "`security` and `x-oaken-callers` say who may call it: operations only persons may call take the session alone.",
    "VERSION": "1",
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The document and the docs are public (SPEC §19): clients are generated from them before anyone signs in.
    # They read no session, so nothing in them can depend on who asks (the operations are the same for all).
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "apps.api.schema.body_required_when_empty_refused",
    ],
    # Swagger UI's files from the installed drf-spectacular-sidecar, served by Oaken (the CSP allows no other);
    # no validator badge, which would fetch an image from elsewhere
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_SETTINGS": {"validatorUrl": None, "deepLinking": True},
}
