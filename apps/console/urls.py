"""Console pages: server-rendered shells whose actions call the operations over the REST door."""

from django.urls import path

from apps.console import views

urlpatterns = [
    path("", views.home, name="console"),
    path("keys", views.keys, name="console-keys"),
    path("connections", views.connections, name="console-connections"),
    path("workspaces", views.workspaces, name="console-workspaces"),
    path("members", views.members, name="console-members"),
    path("exposure", views.exposure, name="console-exposure"),
    path("outbound", views.outbound, name="console-outbound"),
    path("mailboxes", views.mailboxes, name="console-mailboxes"),
    path("tenant", views.switch_tenant, name="switch-tenant"),
    path("invitations/<str:token>", views.invitation, name="invitation"),
    # the same address {% static %} gives; runserver and the test server answer it before this route
    path("static/console/<str:name>", views.asset, name="console-asset"),
]
