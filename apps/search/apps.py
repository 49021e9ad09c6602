from django.apps import AppConfig


class SearchConfig(AppConfig):
    name = "apps.search"
    label = "search"
    verbose_name = "Search"

    def ready(self) -> None:
        # Register the enricher with Celery in every process: the beat and the mail services queue it by name.
        from django.db.backends.signals import connection_created

        from apps.search import tasks  # noqa: F401
        from apps.search.vectors import session_settings

        connection_created.connect(session_settings, dispatch_uid="search.session_settings")
