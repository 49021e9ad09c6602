"""The console's navigation and tenant switcher, on every page of a signed-in person."""

from __future__ import annotations

from typing import Any

from django import template

from apps.console.assets import asset_url
from apps.console.views import current_membership
from apps.workspaces.models import Membership

register = template.Library()


@register.inclusion_tag("console/_nav.html", takes_context=True)
def console_nav(context: template.Context) -> dict[str, Any]:
    request = context["request"]
    memberships = Membership.objects.for_user(request.user).select_related("tenant").order_by("created_at")
    return {"request": request, "current": current_membership(request), "memberships": list(memberships)}


@register.simple_tag
def asset(path: str) -> str:
    """The address of one of the console's own files, named by the files' content (apps.console.assets)."""
    return asset_url(path)
