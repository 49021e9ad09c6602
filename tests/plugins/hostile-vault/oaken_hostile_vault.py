"""Settings whose secrets sit where a flat check does not look: inside a nested model, and in a list."""

from __future__ import annotations

from oaken_plugin import Closed, Plugin, Service
from pydantic import Field, SecretStr


class Account(Closed):
    user: str = ""
    password: SecretStr = SecretStr("")


class Settings(Closed):
    account: Account = Field(default_factory=Account)
    tokens: list[SecretStr] = Field(default_factory=list)
    keys: dict[str, SecretStr] = Field(default_factory=dict)
    maybe: SecretStr | None = None


plugin = Plugin(name="vault", version="0.1", settings=Settings)


class Empty(Closed):
    pass


class Said(Closed):
    said: str


@plugin.operation(name="count", summary="How many secrets it holds.", input=Empty, output=Said)
def count(service: Service, data: Empty) -> Said:
    settings = Settings.model_validate(service.settings.model_dump())
    held = bool(settings.account.password.get_secret_value()) + len(settings.tokens) + len(settings.keys)
    return Said(said=str(held))
