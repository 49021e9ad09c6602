"""Outgoing mail of the service itself (verification, password reset): a file in development, SMTP by setting."""

from __future__ import annotations

from config.embedded import data_dir
from config.env import env_bool, env_int, env_str

EMAIL_BACKEND = env_str("OAKEN_EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend")
EMAIL_FILE_PATH = str(data_dir() / "outbox")
EMAIL_HOST = env_str("OAKEN_SMTP_HOST", "localhost")
EMAIL_PORT = env_int("OAKEN_SMTP_PORT", 587, minimum=1, maximum=65535)
EMAIL_HOST_USER = env_str("OAKEN_SMTP_USER")
EMAIL_HOST_PASSWORD = env_str("OAKEN_SMTP_PASSWORD")
EMAIL_USE_TLS = env_bool("OAKEN_SMTP_STARTTLS", True)
DEFAULT_FROM_EMAIL = env_str("OAKEN_FROM_EMAIL", "Oaken <no-reply@localhost>")
# connected mailboxes may use servers on loopback or private networks (tests; self-hosting beside the mail
# server). Off for a hosted service: a mailbox must not reach into Oaken's own network.
MAIL_ALLOW_PRIVATE_HOSTS = env_bool("OAKEN_MAIL_ALLOW_PRIVATE_HOSTS", False)

# One-click unsubscribe (RFC 8058, apps.outbound.oneclick): the list's https server may be on a loopback or
# private address only when this is on (tests; never for a hosted service). The CA file, when set, is the only
# trust for those POSTs (tests trust their own self-signed server with it); empty: the system's trust store.
UNSUBSCRIBE_ALLOW_PRIVATE_HOSTS = env_bool("OAKEN_UNSUBSCRIBE_ALLOW_PRIVATE_HOSTS", False)
UNSUBSCRIBE_CA_FILE = env_str("OAKEN_UNSUBSCRIBE_CA_FILE")
# The DKIM key lookup (apps.outbound.unsubscribe): a dotted path to a function (name: bytes, timeout) -> the TXT
# record's bytes or None; empty: a DNS TXT lookup (dkimpy's, through dnspython). Tests name one of their own.
DKIM_DNS_FUNC = env_str("OAKEN_DKIM_DNS_FUNC")

LOGIN_URL = "/accounts/sign-in"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/sign-in"
# the sign-in and account-mail throttles are bounds: SIGN_IN_* and ACCOUNT_MAIL_* in OPERATIONS (operations.py)
EMAIL_VERIFICATION_MAX_AGE_SECONDS = env_int("OAKEN_EMAIL_VERIFICATION_MAX_AGE", 3 * 24 * 3600, minimum=600)
# mail files uploaded in the console for an import (upload_import), kept until their import ends
IMPORT_UPLOAD_DIR = str(data_dir() / "imports")

# Mailboxes connected by OAuth (apps.mail.oauth.providers): the built-in providers are enabled when their client
# id and secret are set; any other provider is described in the TOML file OAKEN_MAIL_OAUTH_PROVIDERS names
MAIL_OAUTH_GOOGLE_CLIENT_ID = env_str("OAKEN_GOOGLE_CLIENT_ID")
MAIL_OAUTH_GOOGLE_CLIENT_SECRET = env_str("OAKEN_GOOGLE_CLIENT_SECRET")
MAIL_OAUTH_MICROSOFT_CLIENT_ID = env_str("OAKEN_MICROSOFT_CLIENT_ID")
MAIL_OAUTH_MICROSOFT_CLIENT_SECRET = env_str("OAKEN_MICROSOFT_CLIENT_SECRET")
MAIL_OAUTH_MICROSOFT_TENANT = env_str("OAKEN_MICROSOFT_TENANT", "common") or "common"
MAIL_OAUTH_PROVIDERS_FILE = env_str("OAKEN_MAIL_OAUTH_PROVIDERS")
