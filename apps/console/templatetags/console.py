"""The console's navigation and tenant switcher, on every page of a signed-in person."""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse

from apps.console.assets import asset_url
from apps.console.views import current_membership
from apps.workspaces.models import Membership

register = template.Library()


# the navigation's groups: (a group's name or "" for a link of its own, [(words, url name)])
NAV_GROUPS: list[tuple[str, list[tuple[str, str]]]] = [
    ("", [("Mail", "console-mail"), ("Rules", "console-rules")]),
    (
        "Assistants",
        [
            ("API keys", "console-keys"),
            ("Connections", "console-connections"),
            ("Outbound", "console-outbound"),
            ("Automations", "console-automations"),
            ("Send policies", "console-policies"),
            ("Budgets", "console-budgets"),
            ("Exposure", "console-exposure"),
        ],
    ),
    (
        # the tenant's own things (its mailboxes, people, workspaces, audit log): a workspace is a group of mailboxes
        # inside it, listed under Workspaces (docs/console.md)
        "Tenant",
        [
            ("Mailboxes", "console-mailboxes"),
            ("Import", "console-import"),
            ("Members", "console-members"),
            ("Workspaces", "console-workspaces"),
            ("Plugins", "console-plugins"),
            ("Audit log", "console-audit"),
        ],
    ),
]


def nav_groups(path: str) -> list[dict[str, Any]]:
    """The navigation for a page at `path`: each group's links, the one for this page (or a page under it, such as
    a conversation under /mail) marked current."""
    groups = []
    for name, links in NAV_GROUPS:
        items = []
        for words, url_name in links:
            url = reverse(url_name)
            items.append({"words": words, "url": url, "current": path == url or path.startswith(url + "/")})
        groups.append({"name": name, "slug": name.lower(), "links": items})
    return groups


@register.inclusion_tag("console/_nav.html", takes_context=True)
def console_nav(context: template.Context) -> dict[str, Any]:
    request = context["request"]
    memberships = Membership.objects.for_user(request.user).select_related("tenant").order_by("created_at")
    return {
        "request": request,
        "current": current_membership(request),
        "memberships": list(memberships),
        "groups": nav_groups(request.path),
    }


@register.simple_tag
def asset(path: str) -> str:
    """The address of one of the console's own files, named by the files' content (apps.console.assets)."""
    return asset_url(path)
