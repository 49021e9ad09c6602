from django.apps import AppConfig


class MailConfig(AppConfig):
    name = "apps.mail"
    label = "mail"
    verbose_name = "Mail"

    def ready(self) -> None:
        # Register the mail tasks with Celery in every process, not only in workers (whose autodiscovery
        # finds them): the mail services queue them by name (apps.mail.mirror) instead of importing them.
        # A providers file that cannot work is a start-up error (oaken.E009), not a failed connection later.
        from django.core.checks import register

        from apps.mail import tasks  # noqa: F401
        from apps.mail.oauth.providers import check_providers

        register(check_providers)
