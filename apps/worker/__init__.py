"""The internal door: Celery tasks that call operations through the gate as the system."""
