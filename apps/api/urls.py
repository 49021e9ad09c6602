"""Routes of the REST door: one path per registered operation."""

from django.urls import URLPattern, path

from apps.api.views import operation_view
from apps.operations.registry import registry


def operation_urls() -> list[URLPattern]:
    return [path(f"api/v1/ops/{op.name}", operation_view(op), name=f"op-{op.name}") for op in registry]
