"""Routes for people in the browser."""

from django.contrib.auth import views as auth_views
from django.urls import path

from apps.people_pages import views

urlpatterns = [
    path("accounts/sign-up", views.sign_up, name="sign-up"),
    path("accounts/check-mail", views.check_mail, name="check-mail"),
    path("accounts/verify/<str:token>", views.verify_email, name="verify-email"),
    path("accounts/sign-in", views.SignInView.as_view(), name="sign-in"),
    path("accounts/new-tenant", views.new_tenant, name="new-tenant"),
    path("accounts/sign-out", auth_views.LogoutView.as_view(), name="sign-out"),
    path(
        "accounts/password-reset",
        views.PasswordResetView.as_view(),
        name="password-reset",
    ),
    path(
        "accounts/password-reset/sent",
        auth_views.PasswordResetDoneView.as_view(template_name="people_pages/password_reset_sent.html"),
        name="password-reset-sent",
    ),
    path(
        "accounts/password-reset/<uidb64>/<token>",
        views.PasswordResetConfirmView.as_view(),
        name="password-reset-confirm",
    ),
    path(
        "accounts/password-reset/done",
        auth_views.PasswordResetCompleteView.as_view(template_name="people_pages/password_reset_done.html"),
        name="password-reset-done",
    ),
]
