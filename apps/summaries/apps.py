from django.apps import AppConfig


class SummariesConfig(AppConfig):
    name = "apps.summaries"
    label = "summaries"
    verbose_name = "Summaries"

    def ready(self) -> None:
        # Register the summary tasks with Celery in every process: the operations queue them by name.
        from apps.summaries import tasks  # noqa: F401
