"""The OAuth mail providers enabled here, for the Mailboxes page's "Connect with <provider>" buttons."""

from __future__ import annotations

from django import template

from apps.mail.oauth.providers import providers

register = template.Library()


@register.simple_tag
def mail_oauth_providers() -> list[dict[str, str]]:
    return [{"name": p.name, "label": p.label} for p in providers().values()]
