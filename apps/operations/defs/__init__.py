"""Operation definitions, one module per domain; importing them registers them."""

from __future__ import annotations

import importlib

MODULES = (
    "apps.operations.defs.mail_read",
    "apps.operations.defs.downloads",
    "apps.operations.defs.search",
    "apps.operations.defs.summaries",
    "apps.operations.defs.mail_organize",
    "apps.operations.defs.snooze",
    "apps.operations.defs.rules",
    "apps.operations.defs.awaiting",
    "apps.operations.defs.ai_labels",
    "apps.operations.defs.drafts",
    "apps.operations.defs.outbound_requests",
    "apps.operations.defs.outbound_review",
    "apps.operations.defs.automations",
    "apps.operations.defs.unsubscribe",
    "apps.operations.defs.events",
    "apps.operations.defs.webhooks",
    "apps.operations.defs.policies",
    "apps.operations.defs.budgets",
    "apps.operations.defs.delivery",
    "apps.operations.defs.mailboxes",
    "apps.operations.defs.importing",
    "apps.operations.defs.admin",
    "apps.operations.defs.audit",
    "apps.operations.defs.undo",
    "apps.operations.defs.preferences",
    "apps.operations.defs.signatures",
    "apps.operations.defs.views",
    "apps.operations.defs.snippets",
    "apps.operations.defs.reference",
    "apps.operations.defs.agents",
    "apps.operations.defs.tool_sets",
    "apps.operations.defs.tenancy",
    "apps.operations.defs.plugins",
)


def load_all() -> None:
    """Register every built-in operation, then installed plugins' (once per process)."""
    from apps.operations.plugins import load_plugins

    for module in MODULES:
        importlib.import_module(module)
    load_plugins()
