"""Routes of the REST door: one path per registered operation."""

from django.urls import URLPattern, path

from apps.api.views import UnknownOperationView, operation_view
from apps.operations.registry import registry


def operation_urls() -> list[URLPattern]:
    routes = [path(f"api/v1/ops/{op.name}", operation_view(op), name=f"op-{op.name}") for op in registry]
    # after the operations: any other name is answered by the gate, in the one error shape
    return [*routes, path("api/v1/ops/<str:name>", UnknownOperationView.as_view(), name="op-unknown")]
