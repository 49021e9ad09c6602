"""Hangs in its health check."""

from __future__ import annotations

import time

from oaken_plugin import Closed, Plugin, Service


def _health() -> bool:
    time.sleep(3600)
    return True


plugin = Plugin(name="slow_health", version="0.1", health=_health)


class Empty(Closed):
    pass


@plugin.operation(name="hello", summary="Say hello.", input=Empty, output=Empty)
def hello(service: Service, data: Empty) -> Empty:
    return Empty()
