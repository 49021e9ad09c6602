"""URL routes."""

from django.urls import include, path

from apps.api.schema import SchemaView
from apps.api.urls import operation_urls
from apps.api.views import ApiDocsView, ImportUploadView, OperationListView
from apps.mcp.views import endpoint as mcp_endpoint
from config import health

# what escapes a view: 503 in the error shape while the database is away, never Django's bare HTML 500 on a door;
# what Django refuses before a view, in the error shape on a JSON door and the console's page elsewhere
handler400 = "config.errors.bad_request"
handler403 = "config.errors.permission_denied"
handler404 = "config.errors.page_not_found"
handler500 = "config.errors.server_error"

urlpatterns = [
    path("health", health.health, name="health"),
    # /mcp and /mcp/ are one endpoint: a POST must never be redirected
    path("mcp", mcp_endpoint, name="mcp"),
    path("mcp/", mcp_endpoint),
    path("api/v1/ops", OperationListView.as_view(), name="operations"),
    path("api/v1/imports/upload", ImportUploadView.as_view(), name="import-upload"),
    *operation_urls(),
    path("api/schema", SchemaView.as_view(), name="schema"),
    path("api/docs", ApiDocsView.as_view(url_name="schema"), name="api-docs"),
    path("", include("apps.people_pages.urls")),
    path("", include("apps.console.urls")),
    path("", include("apps.oauth.urls")),
]
