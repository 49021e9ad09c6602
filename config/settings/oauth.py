"""The OAuth 2.1 authorization server (django-oauth-toolkit) for MCP clients, and CORS for what browsers fetch."""

from __future__ import annotations

from apps.core.kinds import Scope
from config.env import env_bool, env_int, env_list, env_str
from config.settings.base import PUBLIC_URL

# OAKEN_PUBLIC_URL, when it is set, names the issuer and the /mcp resource tokens are bound to; when it is not,
# both follow each request's origin (apps.core.links.public_origin; the toolkit derives the issuer the same way).

# Connections (SPEC §7): an access token lives at most this long; a connection at most its chosen lifetime.
OAUTH_ACCESS_TOKEN_SECONDS = env_int("OAKEN_OAUTH_ACCESS_TOKEN_SECONDS", 3600, minimum=60, maximum=3600)
OAUTH_CONNECTION_DEFAULT_HOURS = 24
# the consent page seals what the client asked for (scopes, resource, redirect, PKCE, state); the person has this
# long to answer before the page must be opened again
OAUTH_CONSENT_MAX_AGE_SECONDS = env_int("OAKEN_OAUTH_CONSENT_MAX_AGE_SECONDS", 1800, minimum=60)
# a dynamically registered client that never completed a connection is removed after this long
OAUTH_UNUSED_CLIENT_HOURS = env_int("OAKEN_OAUTH_UNUSED_CLIENT_HOURS", 24, minimum=1)
# the open registration throttles are bounds: OAUTH_REGISTRATIONS_* in OPERATIONS (operations.py)
# redirect URI schemes native clients use besides https and loopback http (RFC 8252 private-use schemes)
OAUTH_NATIVE_REDIRECT_SCHEMES = env_list(
    "OAKEN_OAUTH_NATIVE_REDIRECT_SCHEMES", ["cursor", "vscode", "vscode-insiders", "windsurf", "zed"]
)

# Client ID Metadata Documents (apps.oauth.cimd): a client may name itself by an https URL whose JSON document
# describes it, fetched by Oaken through apps.core.pinned when a person opens the consent page. The toolkit's own
# CIMD (CIMD_ENABLED below) stays off: its fetcher knows neither this allowance nor this trust, it may fetch on the
# token endpoint for anyone, and its bounds would live outside the OPERATIONS block (OAUTH_CLIENT_DOCUMENT_*).
OAUTH_CLIENT_DOCUMENTS = env_bool("OAKEN_OAUTH_CIMD", True)
# a document's host may be a loopback or private address only when this is on (tests; never for a hosted service:
# a client must not make Oaken reach into its own network). The CA file, when set, is the only trust for these
# fetches (tests trust their own self-signed document server with it); empty: the system's trust store.
OAUTH_CLIENT_DOCUMENT_ALLOW_PRIVATE_HOSTS = env_bool("OAKEN_OAUTH_CIMD_ALLOW_PRIVATE_HOSTS", False)
OAUTH_CLIENT_DOCUMENT_CA_FILE = env_str("OAKEN_OAUTH_CIMD_CA_FILE")

OAUTH2_PROVIDER = {
    "OAUTH2_VALIDATOR_CLASS": "apps.oauth.validator.OakenValidator",
    "SCOPES": {
        "read": "Read your mail",
        "write": f"{Scope.WRITE.label}: read state, labels, moving to spam or trash, drafts",
        "send": "Send mail on your behalf, within the limits you set",
    },
    "DEFAULT_SCOPES": ["read"],
    "AUTHORIZATION_CODE_EXPIRE_SECONDS": 120,
    "ACCESS_TOKEN_EXPIRE_SECONDS": OAUTH_ACCESS_TOKEN_SECONDS,
    # a refresh token dies 30 days after its access token expired; the connection's deadline comes first
    "REFRESH_TOKEN_EXPIRE_SECONDS": 30 * 24 * 3600,
    "ROTATE_REFRESH_TOKEN": True,
    "REFRESH_TOKEN_REUSE_PROTECTION": True,
    "REFRESH_TOKEN_GRACE_PERIOD_SECONDS": 0,
    "PKCE_REQUIRED": True,
    "REQUEST_APPROVAL_PROMPT": "force",
    "ALLOWED_REDIRECT_URI_SCHEMES": ["https", "http", *OAUTH_NATIVE_REDIRECT_SCHEMES],
    "ALLOW_LOCALHOST_LOOPBACK": True,  # RFC 8252 §7.3: a native client's loopback port may vary
    "ALLOW_URI_WILDCARDS": False,
    "OAUTH2_RESPONSE_TYPES_SUPPORTED": ["code"],
    "OAUTH2_GRANT_TYPES_SUPPORTED": ["authorization_code", "refresh_token"],
    "OAUTH2_TOKEN_ENDPOINT_AUTH_METHODS_SUPPORTED": ["none", "client_secret_post", "client_secret_basic"],
    "OAUTH2_PROTECTED_RESOURCE_NAME": "Oaken MCP",
    "OIDC_ISS_ENDPOINT": PUBLIC_URL,
    "COMPLIANT_BCP_RFC9700_IMPLICIT_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PASSWORD_GRANT": True,
    "COMPLIANT_BCP_RFC9700_PKCE_METHOD": True,
    "COMPLIANT_BCP_RFC9700_ACCESS_TOKEN_TRANSPORT": True,
    "COMPLIANT_BCP_RFC9700_AUTHZ_RESPONSE_ISS": True,
    "COMPLIANT_BCP_RFC9700_TOKEN_STORAGE": True,
    "COMPLIANT_BCP_RFC9700_REFRESH_TOKEN": True,
    "COMPLIANT_BCP_RFC9700_REDIRECT_URI_MATCHING": True,
    "COMPLIANT_BCP_RFC9700_PKCE_REQUIRED": True,
    "DCR_ENABLED": True,
    "DCR_REGISTRATION_PERMISSION_CLASSES": ("apps.oauth.views.OpenRegistration",),
    "DCR_REGISTRATION_TOKEN_EXPIRE_SECONDS": 90 * 24 * 3600,
    "CIMD_ENABLED": False,  # Oaken's own (OAUTH_CLIENT_DOCUMENTS above)
}

# Browser Origins the MCP endpoint answers (DNS-rebinding defence); "*" allows any well-formed origin, which is
# safe here because every call needs a bearer credential and no cookie is honoured.
MCP_ALLOWED_ORIGINS = env_list("OAKEN_MCP_ALLOWED_ORIGINS", ["*"])

# CORS: browser-based MCP clients fetch discovery, register, exchange tokens and call /mcp from their origin.
# No cookies cross origins (credentials off), so allowing every origin grants nothing a script could not do.
CORS_URLS_REGEX = r"^/(\.well-known/oauth-[a-z-]+(/.*)?|oauth/(token|register|revoke)/?.*|mcp/?)$"
CORS_ALLOW_ALL_ORIGINS = True
CORS_ALLOW_CREDENTIALS = False
CORS_ALLOW_HEADERS = [
    "accept",
    "authorization",
    "content-type",
    "mcp-protocol-version",
    "mcp-session-id",
    "mcp-method",
    "mcp-name",
    "last-event-id",
]
CORS_EXPOSE_HEADERS = ["WWW-Authenticate", "Mcp-Session-Id", "MCP-Protocol-Version"]

# The toolkit's models, named so migrations that point at them resolve (they are swappable in the toolkit).
OAUTH2_PROVIDER_APPLICATION_MODEL = "oauth2_provider.Application"
OAUTH2_PROVIDER_ACCESS_TOKEN_MODEL = "oauth2_provider.AccessToken"  # noqa: S105
OAUTH2_PROVIDER_REFRESH_TOKEN_MODEL = "oauth2_provider.RefreshToken"  # noqa: S105
OAUTH2_PROVIDER_ID_TOKEN_MODEL = "oauth2_provider.IDToken"  # noqa: S105
OAUTH2_PROVIDER_GRANT_MODEL = "oauth2_provider.Grant"
OAUTH2_PROVIDER_DEVICE_GRANT_MODEL = "oauth2_provider.DeviceGrant"
