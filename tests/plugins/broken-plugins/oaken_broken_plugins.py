"""Plugins that break the registry's rules, and one that does not (tests/test_plugins.py)."""

from __future__ import annotations

from oaken_plugin import Closed, MailText, Plugin, Service
from pydantic import ConfigDict, Field


class Empty(Closed):
    seconds: float = Field(default=0, ge=0, le=60)


class Said(Closed):
    said: MailText


class Open(Closed):
    model_config = ConfigDict(extra="allow")


open_input = Plugin(name="open_input", version="0.1")


@open_input.operation(name="anything", summary="Takes any field.", input=Open, output=Said)
def anything(service: Service, data: Open) -> Said:
    return Said(said="")


unpreviewed = Plugin(name="unpreviewed", version="0.1")


@unpreviewed.operation(
    name="change", summary="A mutation with no preview.", input=Empty, output=Said, op_class="mutate"
)
def change(service: Service, data: Empty) -> Said:
    return Said(said="")


misnamed = Plugin(name="other_name", version="0.1")


fine = Plugin(name="fine", version="0.1")


@fine.operation(name="hello", summary="Say hello.", input=Empty, output=Said)
def hello(service: Service, data: Empty) -> Said:
    return Said(said="hello")
