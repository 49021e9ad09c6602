"""Every absolute URL follows one rule: OAKEN_PUBLIC_URL when set, else the request's origin, else where it serves."""

from __future__ import annotations

import re

import pytest
from django.core import mail
from django.test import Client, RequestFactory

from apps.core.links import absolute_url, public_origin
from tests.conftest import Person
from tests.test_rest_door import api_client, post


@pytest.mark.parametrize(
    ("bind", "expected"),
    [
        ("127.0.0.1", "http://127.0.0.1:8765"),
        ("0.0.0.0", "http://127.0.0.1:8765"),  # noqa: S104
        ("::", "http://[::1]:8765"),
        ("::1", "http://[::1]:8765"),
        ("oaken.internal", "http://oaken.internal:8765"),
    ],
)
def test_outside_a_request_links_point_where_oaken_serve_listens(settings, bind: str, expected: str) -> None:
    settings.PUBLIC_URL, settings.SERVE_BIND, settings.SERVE_PORT = "", bind, 8765
    assert public_origin() == expected
    assert absolute_url("/outbound?request=1") == expected + "/outbound?request=1"


def test_the_public_url_wins_over_the_request_and_the_listening_address(settings) -> None:
    settings.PUBLIC_URL, settings.SERVE_PORT = "https://oaken.example", 8765
    request = RequestFactory().get("/", HTTP_HOST="127.0.0.1:8765")
    assert public_origin(request) == public_origin() == "https://oaken.example"


def test_a_request_gives_its_own_origin(settings) -> None:
    settings.PUBLIC_URL, settings.SERVE_PORT = "", 8000
    request = RequestFactory().get("/", HTTP_HOST="localhost:8765", secure=True)
    assert public_origin(request) == "https://localhost:8765"
    with pytest.raises(ValueError, match="starts with /"):
        absolute_url("outbound", request)


@pytest.mark.django_db(transaction=True)  # the invitation is mailed once its transaction commits
def test_an_invitation_made_over_the_rest_door_links_to_the_origin_it_was_made_on(
    alice: Person, mallory: Person, settings
) -> None:
    settings.PUBLIC_URL, settings.SERVE_PORT = "", 8000
    client = api_client(alice.user)
    client.defaults["HTTP_HOST"] = "127.0.0.1:8765"
    answer = post(client, "invite_member", {"email": "carol@example.test"}, confirm=True)
    assert answer.status_code == 200, answer.content
    [sent] = mail.outbox
    assert re.search(r"^http://127\.0\.0\.1:8765/invitations/\S+$", str(sent.body), re.M), sent.body


def test_the_oauth_issuer_follows_the_request_like_every_other_link(db: None, settings) -> None:
    settings.PUBLIC_URL, settings.SERVE_PORT = "", 8000
    doc = Client().get("/.well-known/oauth-authorization-server", HTTP_HOST="127.0.0.1:8765").json()
    assert doc["issuer"] == "http://127.0.0.1:8765"
    resource = Client().get("/.well-known/oauth-protected-resource/mcp", HTTP_HOST="127.0.0.1:8765").json()
    assert resource["resource"] == "http://127.0.0.1:8765/mcp"
