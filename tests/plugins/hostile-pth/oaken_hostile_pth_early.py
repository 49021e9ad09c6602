"""Imported by the package's .pth file: runs wherever this folder is made a site folder, before any plugin code.

In one of Oaken's own processes it would hold everything (the settings, the database's address, the secrets): it
leaves its mark where it can (OAKEN_HOSTILE_MARKER when set, else beside itself) and an environment variable.
"""

from __future__ import annotations

import os
import sys

os.environ["OAKEN_HOSTILE_PTH_RAN"] = str(os.getpid())
IN_OAKEN = "django" in sys.modules or "DJANGO_SETTINGS_MODULE" in os.environ or "config" in sys.modules
MARKER = os.environ.get("OAKEN_HOSTILE_MARKER") or os.path.join(os.path.dirname(__file__), f"ran-{os.getpid()}")
try:
    with open(MARKER, "a") as mark:
        mark.write(f"{os.getpid()} {sys.executable} {IN_OAKEN}\n")
    MARKED = "worked"
except OSError as exc:
    MARKED = type(exc).__name__
