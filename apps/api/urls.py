"""Routes of the REST door: one path per registered operation."""

from django.urls import URLPattern, path

from apps.api.views import UnknownOperationView, operation_view
from apps.operations.registry import Callers, registry


def operation_urls() -> list[URLPattern]:
    # the system's own operations and those of the server's own side (cli and internal doors) have no path (and
    # so no place in the OpenAPI document): a person calling one by name gets the gate's answer for anything
    # not offered; accepting an invitation is the console's invitation page's own call
    hidden = (Callers.INTERNAL, Callers.STANDING, Callers.SERVER, Callers.INVITEES)
    served = (op for op in registry if op.callers not in hidden)
    routes = [path(f"api/v1/ops/{op.name}", operation_view(op), name=f"op-{op.name}") for op in served]
    # after the operations: any other name is answered by the gate, in the one error shape
    return [*routes, path("api/v1/ops/<str:name>", UnknownOperationView.as_view(), name="op-unknown")]
