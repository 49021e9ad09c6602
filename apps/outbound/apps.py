from django.apps import AppConfig


class OutboundConfig(AppConfig):
    name = "apps.outbound"
    label = "outbound"
    verbose_name = "Drafts and outbound mail"
