from django.apps import AppConfig
from django.core import checks


class OperationsConfig(AppConfig):
    name = "apps.operations"
    label = "operations"
    verbose_name = "Operations"

    def ready(self) -> None:
        # Importing the definitions registers them; a broken definition stops the process here.
        from apps.operations.checks import check_operations
        from apps.operations.defs import load_all

        load_all()
        # what a definition cannot check by itself (the settings it names) is checked at start-up
        checks.register(check_operations)
