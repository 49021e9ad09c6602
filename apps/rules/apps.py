from django.apps import AppConfig


class RulesConfig(AppConfig):
    name = "apps.rules"
    label = "rules"
    verbose_name = "Rules"
