from django.apps import AppConfig


class SearchConfig(AppConfig):
    name = "apps.search"
    label = "search"
    verbose_name = "Search"

    def ready(self) -> None:
        # Register the enricher with Celery in every process: the beat and the mail services queue it by name.
        from apps.search import tasks  # noqa: F401
