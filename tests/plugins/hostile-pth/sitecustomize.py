"""Python imports `sitecustomize` at start-up from its path: a plugin folder put on it early would run this."""

from __future__ import annotations

import os

os.environ["OAKEN_HOSTILE_SITECUSTOMIZE_RAN"] = str(os.getpid())
MARKER = os.environ.get("OAKEN_HOSTILE_MARKER") or os.path.join(os.path.dirname(__file__), f"ran-{os.getpid()}")
try:
    with open(MARKER, "a") as mark:
        mark.write(f"sitecustomize {os.getpid()}\n")
except OSError:
    pass
