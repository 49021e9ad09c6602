"""Hangs in every call."""

from __future__ import annotations

import time

from oaken_plugin import Closed, Plugin, Service

plugin = Plugin(name="slow_call", version="0.1")


class Empty(Closed):
    pass


@plugin.operation(name="hang", summary="Never answer.", input=Empty, output=Empty)
def hang(service: Service, data: Empty) -> Empty:
    time.sleep(3600)
    return Empty()
