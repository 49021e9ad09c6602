from django.apps import AppConfig


class GateConfig(AppConfig):
    name = "apps.gate"
    label = "gate"
    verbose_name = "The gate"
