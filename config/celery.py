"""The Celery application: a worker and beat run beside the web server."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("oaken")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
