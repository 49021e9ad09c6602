"""The authorization server's routes, in the toolkit's namespace so its metadata can name them.

Discovery documents live at the site root (clients do not look under a prefix); the endpoints under /oauth/.
"""

from django.urls import path
from oauth2_provider import views as dot

from apps.oauth import views

app_name = "oauth2_provider"

urlpatterns = [
    path(".well-known/oauth-authorization-server", views.ServerMetadataView.as_view(), name="oauth-server-metadata"),
    path(
        ".well-known/oauth-protected-resource",
        views.ProtectedResourceMetadataView.as_view(),
        name="oauth-resource-metadata",
    ),
    path(
        ".well-known/oauth-protected-resource/mcp",
        views.ProtectedResourceMetadataView.as_view(),
        name="oauth-resource-metadata-mcp",
    ),
    path(
        ".well-known/oauth-protected-resource/api/v1",
        views.ApiResourceMetadataView.as_view(),
        name="oauth-resource-metadata-api",
    ),
    path("oauth/authorize/", views.ConsentView.as_view(), name="authorize"),
    path("oauth/token/", views.TokenView.as_view(), name="token"),
    path("oauth/revoke/", dot.RevokeTokenView.as_view(), name="revoke-token"),
    path("oauth/register/", views.RegistrationView.as_view(), name="dcr-register"),
    path("oauth/register/<str:client_id>/", views.RegistrationManagementView.as_view(), name="dcr-register-management"),
]
