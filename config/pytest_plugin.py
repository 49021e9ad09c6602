"""Loaded before pytest-django: starts the test session's embedded servers (one per session)."""

from __future__ import annotations

import os

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Point the session at its own data folder and start (or attach to) its servers."""
    from config import embedded

    os.environ["OAKEN_DATA_DIR"] = os.environ.get("OAKEN_TEST_DATA_DIR") or str(embedded.BASE_DIR / "var" / "test")
    # one server per session; a database per session, so sessions running side by side never collide
    os.environ.setdefault("OAKEN_TEST_DATABASE", f"test_oaken_{os.getpid()}")
    # the tests' IMAP and SMTP servers listen on loopback (tests of the refusal switch it off)
    os.environ.setdefault("OAKEN_MAIL_ALLOW_PRIVATE_HOSTS", "true")
    embedded_database = not os.environ.get("DATABASE_URL")
    embedded.ensure_environment()
    if embedded_database:
        _tune_for_tests(os.environ["DATABASE_URL"])


def _tune_for_tests(url: str) -> None:
    """The test server's data are thrown away, so durability is traded for speed."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for name in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(f"ALTER SYSTEM SET {name} = off")
        conn.execute("SELECT pg_reload_conf()")
