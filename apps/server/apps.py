from django.apps import AppConfig


class ServerConfig(AppConfig):
    name = "apps.server"
    label = "server"
    verbose_name = "Running Oaken"
