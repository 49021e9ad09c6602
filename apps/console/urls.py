"""Console pages: server-rendered shells whose actions call the operations over the REST door."""

from django.urls import path

from apps.console import mailoauth, views

urlpatterns = [
    path("", views.home, name="console"),
    path("keys", views.page, {"name": "keys"}, name="console-keys"),
    path("connections", views.page, {"name": "connections"}, name="console-connections"),
    path("workspaces", views.page, {"name": "workspaces"}, name="console-workspaces"),
    path("members", views.page, {"name": "members"}, name="console-members"),
    path("exposure", views.page, {"name": "exposure"}, name="console-exposure"),
    path("outbound", views.page, {"name": "outbound"}, name="console-outbound"),
    path("automations", views.page, {"name": "automations"}, name="console-automations"),
    path("policies", views.page, {"name": "policies"}, name="console-policies"),
    path("mailboxes", views.page, {"name": "mailboxes"}, name="console-mailboxes"),
    path("mailboxes/oauth/start", mailoauth.start, name="console-mailbox-oauth-start"),
    path("mailboxes/oauth/callback", mailoauth.callback, name="console-mailbox-oauth-callback"),
    path("budgets", views.page, {"name": "budgets"}, name="console-budgets"),
    path("plugins", views.page, {"name": "plugins"}, name="console-plugins"),
    path("audit", views.page, {"name": "audit"}, name="console-audit"),
    path("audit/verifier.py", views.audit_verifier, name="console-audit-verifier"),
    path("import", views.import_page, name="console-import"),
    path("rules", views.page, {"name": "rules"}, name="console-rules"),
    path("mail", views.mail, name="console-mail"),
    path("mail/messages/<str:message_id>/html", views.message_html, name="console-message-html"),
    # a conversation, and a folder of an account (its name may hold "/"): the mailbox, opened on them
    path("mail/t/<str:thread_id>", views.mail, name="console-mail-thread"),
    path("mail/<str:account_id>/<path:folder>", views.mail, name="console-mail-folder"),
    path("tenant", views.switch_tenant, name="switch-tenant"),
    path("invitations/<str:token>", views.invitation, name="invitation"),
    # the same address {% static %} gives; runserver and the test server answer it before this route
    path("assets/<str:version>/<path:path>", views.asset, name="versioned-asset"),
    path("static/<path:path>", views.asset, name="static-asset"),
]
