"""What every answer tells the browser: a strict Content-Security-Policy, HSTS behind HTTPS, and static files
(the API docs' included) served by Oaken itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from tests.conftest import Person
from tests.oauthflow import start

ROOT = Path(__file__).resolve().parent.parent
SIDECAR = "/static/drf_spectacular_sidecar/swagger-ui-dist/"


def _policy(response: object) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]  # type: ignore[index]
    directives = [part.split() for part in header.split(";") if part.strip()]
    return {name: values for name, *values in directives}


def _signed_in(p: Person) -> Client:
    client = Client()
    client.force_login(p.user)
    return client


STRICT = {
    "default-src": ["'none'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'none'"],
    "frame-ancestors": ["'none'"],
    "form-action": ["'self'"],
}


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/keys",
        "/exposure",
        "/outbound",
        "/accounts/sign-in",
        "/accounts/sign-up",
        "/accounts/password-reset",
        "/api/docs",
        "/api/schema",
        "/no/such/page",
        "/static/console/console.css",
        "/health",
    ],
)
def test_every_answer_carries_a_strict_policy(path: str, alice: Person, mallory: Person) -> None:
    response = _signed_in(alice).get(path)
    assert response.status_code in {200, 404}, path
    policy = _policy(response)
    assert {name: policy.get(name) for name in STRICT} == STRICT
    # nothing may run or load from anywhere but Oaken: no inline script, no eval, no other host
    assert not [v for values in policy.values() for v in values if v not in {"'self'", "'none'", "data:"}], policy
    assert policy["img-src"] == ["'self'", "data:"]


def test_the_consent_page_lifts_only_form_action(db: None, alice: Person) -> None:
    browser = _signed_in(alice)
    auth = start(browser)
    page = browser.get(auth.url())
    assert page.status_code == 200 and "Allow" in page.content.decode()
    policy = _policy(page)
    assert "form-action" not in policy  # Allow redirects to the client's own redirect URI
    assert {name: policy.get(name) for name in STRICT if name != "form-action"} == {
        name: value for name, value in STRICT.items() if name != "form-action"
    }


def _served_with(**env: str) -> dict[str, str]:
    """The headers of one HTTPS answer from a fresh process configured by `env` alone."""
    script = (
        "import django, json; django.setup(); from django.test import Client; "
        "r = Client(HTTP_HOST='localhost').get('/accounts/sign-in', secure=True); "
        "print(json.dumps({**dict(r.headers), 'status': str(r.status_code)}))"
    )
    run_env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **env}
    out = subprocess.run(
        [sys.executable, "-c", script], env=run_env, cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    headers: dict[str, str] = json.loads(out.stdout.strip().splitlines()[-1])
    return headers


def test_hsts_is_sent_when_cookies_are_secure(db: None) -> None:
    secure = _served_with(OAKEN_SECURE_COOKIES="true")
    assert secure["status"] == "200"
    assert secure["Strict-Transport-Security"] == "max-age=31536000"
    assert "Strict-Transport-Security" not in _served_with(OAKEN_SECURE_COOKIES="false")
    shorter = _served_with(OAKEN_SECURE_COOKIES="true", OAKEN_HSTS_SECONDS="600")
    assert shorter["Strict-Transport-Security"] == "max-age=600"


def test_the_api_docs_load_only_oakens_own_files(db: None) -> None:
    page = Client().get("/api/docs")
    html = page.content.decode()
    assert page.status_code == 200 and "<script>" not in html and "<style" not in html and " style=" not in html
    assert "cdn" not in html.lower() and "@latest" not in html and "//" not in html.replace("<!doctype html>", "")
    for asset in ("swagger-ui.css", "swagger-ui-bundle.js", "swagger-ui-standalone-preset.js"):
        assert f'"{SIDECAR}{asset}"' in html
        served = Client().get(SIDECAR + asset)  # no static server in front: Oaken answers it (as under gunicorn)
        assert served.status_code == 200 and served["Content-Type"].split(";")[0] in {"text/css", "text/javascript"}
    assert '<script src="/api/docs?script="></script>' in html
    start_up = Client().get("/api/docs?script=")
    assert start_up.status_code == 200 and start_up["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle(" in start_up.content.decode() and '"validatorUrl": null' in start_up.content.decode()


def test_static_files_are_served_by_name_only(db: None) -> None:
    favicon = Client().get("/static/favicon.svg")
    assert favicon.status_code == 200 and favicon["Content-Type"] == "image/svg+xml"
    assert favicon.content.startswith(b"<svg")
    for path in (
        "/static/console/other.js",
        "/static/../pyproject.toml",
        "/static/console/../../manage.py",
        "/static/drf_spectacular_sidecar/swagger-ui-dist/oauth2-redirect.html",
        "/static/favicon.svg.py",
    ):
        assert Client().get(path).status_code == 404, path


def test_machine_doors_carry_the_same_policy(db: None, alice: Person) -> None:
    """/mcp and the REST door answer JSON with the header django-csp itself builds from the settings (built
    once per process here: apps.core.security_headers), refusals included."""
    from csp.utils import build_policy

    built = build_policy()
    answers = [
        Client().get("/mcp"),  # 405: no stream
        Client().post("/mcp", {}, content_type="application/json"),  # 401: no credential
        Client().post("/api/v1/ops/status", {}, content_type="application/json"),
        _signed_in(alice).post("/api/v1/ops/status", {}, content_type="application/json"),
    ]
    for answer in answers:
        assert answer["Content-Security-Policy"] == built, answer.status_code
        assert {name: _policy(answer).get(name) for name in STRICT} == STRICT


def test_a_changed_policy_setting_is_served_at_once(db: None) -> None:
    """The policy built once is built again when its settings change (as a test or a reload changes them)."""
    from csp.utils import build_policy
    from django.test import override_settings

    policy = {"DIRECTIVES": {"default-src": ["'none'"], "img-src": ["'self'"]}, "EXCLUDE_URL_PREFIXES": ["/mcp"]}
    report = {"DIRECTIVES": {"default-src": ["'self'"]}}
    with override_settings(CONTENT_SECURITY_POLICY=policy, CONTENT_SECURITY_POLICY_REPORT_ONLY=report):
        health = Client().get("/health")
        assert health["Content-Security-Policy"] == build_policy() and _policy(health) == {
            "default-src": ["'none'"],
            "img-src": ["'self'"],
        }
        assert health["Content-Security-Policy-Report-Only"] == "default-src 'self'"
        excluded = Client().get("/mcp")
        assert "Content-Security-Policy" not in excluded
        assert excluded["Content-Security-Policy-Report-Only"] == "default-src 'self'"
    after = Client().get("/health")
    assert {name: _policy(after).get(name) for name in STRICT} == STRICT
    assert "Content-Security-Policy-Report-Only" not in after
