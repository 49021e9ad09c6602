"""Where plugins are installed and how their processes are shut in (docs/plugins.md); their bounds are in
OPERATIONS (config/settings/operations.py)."""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from config.env import env_str

from .base import BASE_DIR

# bwrap: every plugin process in an operating-system sandbox, and no plugin where one cannot be made; none: no
# sandbox at all, for development only (loudly logged): a plugin's code can then do what Oaken's user can
PLUGIN_SANDBOX = env_str("OAKEN_PLUGIN_SANDBOX", "bwrap")
if PLUGIN_SANDBOX not in {"bwrap", "none"}:
    raise ImproperlyConfigured("OAKEN_PLUGIN_SANDBOX must be bwrap or none")
# the plugin environment: a Python environment of its own (never Oaken's), where plugins are installed
PLUGIN_ENV = Path(env_str("OAKEN_PLUGIN_ENV") or BASE_DIR / ".plugins")
# more folders of installed plugin packages (site folders, `pip install --target`), read beside the environment
PLUGIN_PATH = [Path(p) for p in env_str("OAKEN_PLUGIN_PATH").split(os.pathsep) if p.strip()]
