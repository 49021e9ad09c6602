"""URL routes."""

from django.urls import path

from config import health

urlpatterns = [
    path("health", health.health, name="health"),
]
