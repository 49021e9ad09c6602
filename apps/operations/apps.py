from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "apps.operations"
    label = "operations"
    verbose_name = "Operations"

    def ready(self) -> None:
        # Importing the definitions registers them; a broken definition stops the process here.
        from apps.operations.defs import load_all

        load_all()
