"""Hangs when asked what it offers."""

from __future__ import annotations

import time
from typing import Any

from oaken_plugin import Closed, Plugin, Service


class Sleepy(Plugin):
    def describe(self) -> dict[str, Any]:
        time.sleep(3600)
        return super().describe()


plugin = Sleepy(name="slow_describe", version="0.1")


class Empty(Closed):
    pass


@plugin.operation(name="hello", summary="Say hello.", input=Empty, output=Empty)
def hello(service: Service, data: Empty) -> Empty:
    return Empty()
