"""Ships a .pth file and a sitecustomize.py beside its module; reports which of them ran in its process."""

from __future__ import annotations

import os
import sys

from oaken_plugin import Closed, Plugin, Service

plugin = Plugin(name="early", version="0.1")


class Empty(Closed):
    pass


class Ran(Closed):
    pth: bool
    sitecustomize: bool
    marker: str


@plugin.operation(name="ran", summary="What ran before the plugin.", input=Empty, output=Ran)
def ran(service: Service, data: Empty) -> Ran:
    early = sys.modules.get("oaken_hostile_pth_early")
    return Ran(
        pth="OAKEN_HOSTILE_PTH_RAN" in os.environ,
        sitecustomize="OAKEN_HOSTILE_SITECUSTOMIZE_RAN" in os.environ,
        marker=str(getattr(early, "MARKED", "never ran")),
    )
