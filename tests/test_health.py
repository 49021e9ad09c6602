"""GET /health answers ok only while the database and Redis both answer."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client

from config import health


@pytest.fixture(autouse=True)
def _fresh_redis_client() -> None:
    health._redis_client.cache_clear()


def test_it_answers_ok_without_a_version(db: None, client: Client) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_it_fails_when_redis_is_unreachable(db: None, client: Client, settings, tmp_path) -> None:
    settings.REDIS_URL = f"unix://{tmp_path}/nothing-listens-here.sock"
    response = client.get("/health")
    assert response.status_code == 503 and response["Retry-After"] == "5"
    assert response.json() == {
        "status": "unavailable",
        "failing": ["redis"],
        "error": {"code": "SERVICE_UNAVAILABLE", "message": "not answering: redis; try again shortly"},
    }


def test_it_fails_when_the_database_is_unreachable(transactional_db: None, client: Client, tmp_path) -> None:
    original = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict["HOST"] = str(tmp_path)  # a socket folder where no server listens
    connection.settings_dict["PORT"] = "5432"
    try:
        response = client.get("/health")
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(original)
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "failing": ["database"],
        "error": {"code": "SERVICE_UNAVAILABLE", "message": "not answering: database; try again shortly"},
    }


def test_it_only_answers_get(db: None, client: Client) -> None:
    assert client.post("/health").status_code == 405
