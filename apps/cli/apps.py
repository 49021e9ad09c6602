from django.apps import AppConfig


class CliConfig(AppConfig):
    """The cli door: the `oaken` commands a person runs on the server, each one a thin translation to the gate."""

    name = "apps.cli"
    label = "cli"
    verbose_name = "The cli door"
