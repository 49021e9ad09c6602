from django.apps import AppConfig


class WorkerConfig(AppConfig):
    name = "apps.worker"
    label = "worker"
    verbose_name = "The internal door (Celery tasks through the gate)"
