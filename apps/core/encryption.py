"""Values encrypted at rest (mailbox credentials, plugin settings) with Fernet keys from settings (newest first)."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models


@cache
def _cipher(keys: tuple[str, ...]) -> MultiFernet:
    try:
        return MultiFernet([Fernet(key.encode()) for key in keys])
    except (ValueError, TypeError):
        raise ImproperlyConfigured("OAKEN_ENCRYPTION_KEYS must hold Fernet keys") from None


def cipher() -> MultiFernet:
    """The cipher for the configured keys: encrypts with the first, decrypts with any."""
    return _cipher(tuple(settings.ENCRYPTION_KEYS))


class CredentialsUnreadableError(Exception):
    """Stored credentials cannot be decrypted with any configured key."""


class EncryptedJSONField(models.BinaryField):
    """A JSON object stored encrypted; the database never sees it in the clear."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("default", dict)
        kwargs["editable"] = False
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        kwargs.pop("editable", None)
        return name, path, args, kwargs

    def get_prep_value(self, value: Any) -> Any:
        if value is None:
            return None
        token = cipher().encrypt(json.dumps(value, separators=(",", ":")).encode())
        return super().get_prep_value(token)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if value is None:
            return None
        try:
            return json.loads(cipher().decrypt(bytes(value)))
        except InvalidToken:
            raise CredentialsUnreadableError from None

    def to_python(self, value: Any) -> Any:
        return value
