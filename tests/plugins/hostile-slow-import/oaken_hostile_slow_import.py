"""Hangs at import: every process of it never says it is ready."""

from __future__ import annotations

import time

from oaken_plugin import Closed, Plugin, Service

time.sleep(3600)

plugin = Plugin(name="slow_import", version="0.1")


class Empty(Closed):
    pass


@plugin.operation(name="hello", summary="Say hello.", input=Empty, output=Empty)
def hello(service: Service, data: Empty) -> Empty:
    return Empty()
