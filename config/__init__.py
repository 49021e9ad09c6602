"""Project configuration: settings, URLs, Celery, embedded services and the `oaken` command."""

from config.celery import app as celery_app

__all__ = ["celery_app"]
