"""Housekeeping for the authorization server, run by Celery beat."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db.models import Exists, OuterRef
from django.utils import timezone
from oauth2_provider.models import Application, get_grant_model

from apps.agents.models import Connection


@shared_task(name="oauth.forget_unused_clients", ignore_result=True)
def forget_unused_clients() -> dict[str, int]:
    """Remove consents whose code was never redeemed, and clients (registered, or described by a metadata
    document) that never became a connection within OAKEN_OAUTH_UNUSED_CLIENT_HOURS (open registration must not
    grow the table forever)."""
    now = timezone.now()
    cutoff = now - timedelta(hours=settings.OAUTH_UNUSED_CLIENT_HOURS)
    # housekeeping across tenants: the system's own work
    _, gone = Connection.objects.unscoped().filter(activated_at__isnull=True, created_at__lt=cutoff).delete()
    pending = gone.get(Connection._meta.label, 0)
    used = Connection.objects.unscoped().filter(application=OuterRef("pk"))
    live_grant = get_grant_model().objects.filter(application=OuterRef("pk"), expires__gt=now)
    # a client described by a metadata document is recorded again from its document when next asked for
    sources = (Application.RegistrationSource.DCR, Application.RegistrationSource.CIMD)
    unused = Application.objects.filter(registration_source__in=sources, created__lt=cutoff).filter(
        ~Exists(used), ~Exists(live_grant)
    )
    _, deleted = unused.delete()
    return {"pending_connections": pending, "clients": deleted.get(Application._meta.label, 0)}
