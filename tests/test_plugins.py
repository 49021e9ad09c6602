"""Plugins (SPEC §17): operations from installed packages, run in sandboxed processes that hold nothing of Oaken's.

The test plugins are packages laid out as pip lays them out in a site folder (tests/plugins/<folder>: the
module and its .dist-info), installed for a test by loading that folder (what OAKEN_PLUGIN_PATH names); the
calendar plugin (plugins/oaken-calendar) is installed in the plugin environment by the project's own set-up, as a
user's would be. The sandbox itself is attacked in tests/test_plugin_sandbox.py.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psutil
import pytest
from django.conf import settings

from apps.audit.models import AuditEvent
from apps.core.kinds import Door
from apps.gate.dispatch import dispatch
from apps.mail.importing import import_mail
from apps.mail.models import Message
from apps.operations import plugin_runtime, plugins, sandbox
from apps.operations.exposure import offered_operations
from apps.operations.plugin_processes import PluginFailure, PluginProcess
from apps.operations.plugin_secrets import MASK, SettingsSchema
from tests.callers import as_agent, as_person, call, joined, refusal
from tests.conftest import Person
from tests.mailfactory import write_mbox

PLUGINS_DIR = Path(__file__).parent / "plugins"
TEST_PLUGINS = ("keyed", "probe", "raiser", "sick", "sleeper", "vault")
SICK_FLAG = PLUGINS_DIR / "test-plugins" / "sick.flag"


@pytest.fixture
def bounds(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """settings.OPERATIONS, changeable for one test."""
    changed = dict(settings.OPERATIONS)
    monkeypatch.setattr(settings, "OPERATIONS", changed)
    return changed


@pytest.fixture
def installed() -> Iterator[list[str]]:
    SICK_FLAG.unlink(missing_ok=True)
    loaded = plugins.load_plugins([PLUGINS_DIR / "test-plugins"])
    yield loaded
    for name in TEST_PLUGINS:
        plugins.unload_plugin(name)
    SICK_FLAG.unlink(missing_ok=True)


def expose(p: Person, target: str, level: str = "on") -> None:
    dispatch(as_person(p), Door.UI, "set_operation_exposure", {"operation": target, "level": level}, confirm=True)


def offered(caller: Any) -> set[str]:
    return {op.name for op in offered_operations(caller)}


# ---------------------------------------------------------------- isolation


def test_a_plugin_gets_nothing_to_work_with(alice: Person, installed: list[str]) -> None:
    assert installed == list(TEST_PLUGINS)
    database = urlsplit(os.environ["DATABASE_URL"])
    host = parse_qs(database.query).get("host", [database.hostname or ""])[0]
    socket_path = str(Path(host) / f".s.PGSQL.{database.port or 5432}")
    secret = Path(settings.BASE_DIR) / "var" / "secrets" / "encryption-key"
    secret_file = str(secret) if secret.exists() else str(Path(os.environ.get("OAKEN_DATA_DIR", "var")) / "secrets")
    tried = call(as_person(alice), "probe.reach", {"socket_path": socket_path, "secret_file": secret_file})["tried"]
    assert tried == {
        "import django.db": "ModuleNotFoundError",  # not in the plugin environment at all
        "import psycopg": "ModuleNotFoundError",
        "postgres socket": "PermissionError",  # no socket can be made (seccomp)
        "tcp": "PermissionError",
        "secret file": "FileNotFoundError",  # the data folder is not in its filesystem
        "parent environment": "PermissionError",  # its parent is bwrap's init, of another user
        "subprocess": "PermissionError",  # no process can be started
        "write a file": "OSError",  # its own folder is read-only
        "DATABASE_URL": "None",
        "time zone data": "worked: TZif",  # what it needs of /etc is readable
    }
    environment = call(as_person(alice), "probe.reach", {})["environment"]
    assert not [name for name in environment if name.startswith(("DATABASE", "REDIS", "DJANGO", "OAKEN", "CELERY"))]
    assert not (PLUGINS_DIR / "test-plugins" / "wrote-here").exists()


def test_an_exception_is_reported_by_its_type_only(alice: Person, mallory: Person, installed: list[str]) -> None:
    error = refusal(as_person(alice), "raiser.boom", {})
    assert error.code == "PLUGIN_FAILED" and "ValueError" in error.message
    assert "merger" not in error.message and "Alice" not in error.message
    event = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="raiser.boom").get()
    assert event.outcome != "ok" and "merger" not in str(event.__dict__)
    assert not AuditEvent.objects.for_tenant(mallory.tenant).filter(operation="raiser.boom").exists()


def test_a_slow_call_is_cut_at_its_timeout_and_the_next_call_works(
    alice: Person, installed: list[str], bounds: dict[str, int]
) -> None:
    bounds["PLUGIN_TIMEOUT_SECONDS"] = 1
    me = as_person(alice)
    first = call(me, "sleeper.nap", {"seconds": 0})["said"]
    started = time.monotonic()
    error = refusal(me, "sleeper.nap", {"seconds": 30})
    assert error.code == "PLUGIN_FAILED" and "did not answer within 1 s" in error.message
    assert time.monotonic() - started < 10  # cut, not waited for
    after = call(me, "sleeper.nap", {"seconds": 0})["said"]
    # the process that overran (the one the first call had used) was killed: the next call ran in another one
    assert after.startswith("slept 0 s") and after.split()[-1] != first.split()[-1]


def test_a_plugin_whose_processes_keep_crashing_offers_nothing_to_that_tenant_only(
    alice: Person, mallory: Person, installed: list[str], bounds: dict[str, int]
) -> None:
    """The calls that end its processes are that tenant's inputs: another tenant keeps the plugin."""
    bounds["PLUGIN_CRASHES_MAX"] = 2
    for p in (alice, mallory):
        expose(p, "plugin:sleeper")
    agent = as_agent(alice)
    assert "sleeper.nap" in offered(agent)
    for _ in range(2):
        assert refusal(as_person(alice), "sleeper.die", {}).code == "PLUGIN_FAILED"
    assert "sleeper.nap" not in offered(agent)
    assert refusal(as_person(alice), "sleeper.nap", {}).code == "NOT_AVAILABLE"
    assert "sleeper.nap" in offered(as_agent(mallory))
    assert call(as_person(mallory), "sleeper.nap", {"seconds": 0})["said"].startswith("slept 0 s")


def eventually(holds: Callable[[], bool], seconds: float = 10) -> bool:
    """Whether `holds()` comes true within `seconds` (health is checked in the background: never waited for)."""
    deadline = time.monotonic() + seconds
    while not holds():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_failing_health_check_hides_the_plugin_until_it_passes(
    alice: Person, installed: list[str], bounds: dict[str, int]
) -> None:
    expose(alice, "sick.hello")
    agent = as_agent(alice)
    assert "sick.hello" in offered(agent)
    assert call(agent, "sick.hello", {}) == {"said": "hello"}
    bounds["PLUGIN_HEALTH_SECONDS"] = 1
    SICK_FLAG.write_text("")
    time.sleep(1.1)
    # a stale answer is given at once while the check runs in the background
    assert eventually(lambda: "sick.hello" not in offered(agent))
    assert refusal(agent, "sick.hello", {}).code == "NOT_AVAILABLE"
    assert refusal(as_person(alice), "sick.hello", {}).code == "NOT_AVAILABLE"
    SICK_FLAG.unlink()
    time.sleep(1.1)
    assert eventually(lambda: "sick.hello" in offered(agent))
    assert call(agent, "sick.hello", {}) == {"said": "hello"}


def test_a_plugin_breaking_a_registry_rule_is_refused_and_the_rest_loads(
    alice: Person, caplog: pytest.LogCaptureFixture
) -> None:
    broken = {"open_input", "unpreviewed", "misnamed", "missing"}
    with caplog.at_level(logging.ERROR, logger="oaken.plugins"):
        loaded = plugins.load_plugins([PLUGINS_DIR / "broken-plugins"])
    try:
        assert loaded == ["fine"]
        assert not [op for op in plugins.registry if op.plugin in broken]
        lines = [r.getMessage() for r in caplog.records]
        assert any("open_input refused" in line and "extra fields" in line for line in lines)
        assert any("unpreviewed refused" in line and "preview" in line for line in lines)
        assert any("misnamed refused" in line and "another name" in line for line in lines)
        assert any("missing refused" in line and "failed to load (ModuleNotFoundError)" in line for line in lines)
        # an admin reads why, in Oaken's words
        refused = {r["name"]: r["reason"] for r in call(as_person(alice), "list_plugins")["refused"]}
        assert broken <= set(refused) and "extra fields" in refused["open_input"]
    finally:
        for name in (*broken, "fine"):
            plugins.unload_plugin(name)


# ---------------------------------------------------------------- gate, exposure, settings


def test_plugin_operations_start_off_and_an_admins_switch_is_audited(
    alice: Person, mallory: Person, installed: list[str]
) -> None:
    agent = as_agent(alice)
    assert "sick.hello" not in offered(agent)
    assert refusal(agent, "sick.hello", {}).code == "NOT_AVAILABLE"
    member = joined(alice, "member@example.test")
    error = refusal(as_person(member), "set_operation_exposure", {"operation": "plugin:sick", "level": "on"})
    assert error.code == "FORBIDDEN"
    expose(alice, "plugin:sick")
    assert "sick.hello" in offered(agent)
    assert "sick.hello" not in offered(as_agent(mallory))
    expose(alice, "sick.hello", "off")  # one operation set apart from its plugin
    assert "sick.hello" not in offered(agent)
    events = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="set_operation_exposure")
    assert events.filter(outcome="ok").count() == 2


def test_settings_are_validated_kept_per_tenant_and_never_shown_with_secrets(
    alice: Person, mallory: Person, installed: list[str]
) -> None:
    me = as_person(alice)

    def set_settings(p: Person, values: dict[str, Any]) -> dict[str, Any]:
        return dispatch(
            as_person(p), Door.UI, "set_plugin_settings", {"plugin": "keyed", "settings": values}, confirm=True
        ).output

    error = refusal(me, "set_plugin_settings", {"plugin": "keyed", "settings": {"region": "mars"}}, confirm=True)
    assert (error.code, error.field) == ("INVALID_INPUT", "settings.region") and "mars" not in error.message
    # a setting the plugin's schema does not know is not named: its name is the caller's own text
    error = refusal(me, "set_plugin_settings", {"plugin": "keyed", "settings": {"colour": "red"}}, confirm=True)
    assert (error.code, error.field) == ("INVALID_INPUT", "settings") and "colour" not in error.message
    assert "an unknown argument" in error.message
    assert refusal(me, "set_plugin_settings", {"plugin": "nope", "settings": {}}, confirm=True).code == "NOT_FOUND"

    out = set_settings(alice, {"api_key": "sk-live-0123456789", "region": "us"})
    assert out["changed"] == ["api_key", "region"] and out["settings"]["api_key"] == "********"
    listed = {p["name"]: p for p in call(me, "list_plugins")["plugins"]}
    assert listed["keyed"]["settings"] == {"api_key": "********", "region": "us"}
    assert "api_key" in listed["keyed"]["settings_schema"]["properties"] and listed["keyed"]["healthy"] is True
    assert call(me, "keyed.whoami", {}) == {"said": "us with a key"}
    # the mask sent back keeps the key
    assert set_settings(alice, {"api_key": "********", "region": "eu"})["changed"] == ["region"]
    assert call(me, "keyed.whoami", {}) == {"said": "eu with a key"}
    # mallory's tenant has its own settings
    assert call(as_person(mallory), "keyed.whoami", {}) == {"said": "eu without a key"}
    events = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="set_plugin_settings")
    assert events.filter(outcome="ok").count() == 2
    assert not [e for e in events if "sk-live" in str(e.__dict__)]
    member = joined(alice, "member2@example.test")
    assert refusal(as_person(member), "list_plugins").code == "FORBIDDEN"


VAULT_SECRETS = {
    "server": "pw-main-0123456789",
    "backup": "pw-backup-0123456789",
    "mirror a": "pw-mirror-a-0123456789",
    "mirror b": "pw-mirror-b-0123456789",
    "token 1": "tok-one-0123456789",
    "token 2": "tok-two-0123456789",
    "ops key": "key-ops-0123456789",
    "fallback": "fallback-0123456789",
}


def fingerprint(secret: str) -> str:
    """What the vault plugin says of a secret it was given (tests/plugins/test-plugins: `vault.fingerprints`)."""
    return hashlib.sha256(secret.encode()).hexdigest()[:12]


def set_vault(p: Person, values: dict[str, Any]) -> dict[str, Any]:
    return dispatch(
        as_person(p), Door.UI, "set_plugin_settings", {"plugin": "vault", "settings": values}, confirm=True
    ).output


def vault_settings(p: Person) -> dict[str, Any]:
    listed: dict[str, Any] = {x["name"]: x for x in call(as_person(p), "list_plugins")["plugins"]}["vault"]
    return listed["settings"]


def shows_no_secret(anything: object) -> bool:
    text = json.dumps(anything, default=str)
    return not [name for name, secret in VAULT_SECRETS.items() if secret in text]


def test_secrets_nested_in_models_lists_and_dicts_are_never_shown(
    alice: Person, mallory: Person, installed: list[str]
) -> None:
    s = VAULT_SECRETS
    values = {
        "server": {"host": "imap.example.test", "port": 993, "password": s["server"]},
        "backup": {"host": "backup.example.test", "password": s["backup"]},
        "mirrors": [
            {"host": "a.example.test", "password": s["mirror a"]},
            {"host": "b.example.test", "password": s["mirror b"]},
        ],
        "tokens": [s["token 1"], s["token 2"]],
        "labels": ["work", "travel"],
        "team_keys": {"ops": s["ops key"]},
        "limits": {"search": 10},
        "fallback": s["fallback"],
    }
    # the proposal a person confirms names the settings, never their values
    asked = refusal(as_person(alice), "set_plugin_settings", {"plugin": "vault", "settings": values})
    assert asked.code == "CONFIRMATION_REQUIRED" and shows_no_secret(asked.proposal)
    out = set_vault(alice, values)
    assert out["changed"] == [
        "backup.host",
        "backup.password",
        "fallback",
        "labels",
        "limits",
        "mirrors",
        "server.host",
        "server.password",
        "server.port",
        "team_keys",
        "tokens",
    ]
    mask = MASK
    expected = {
        "server": {"host": "imap.example.test", "port": 993, "password": mask},
        "backup": {"host": "backup.example.test", "password": mask},
        "mirrors": [{"host": "a.example.test", "password": mask}, {"host": "b.example.test", "password": mask}],
        "tokens": [mask, mask],
        "labels": ["work", "travel"],
        "team_keys": {"ops": mask},
        "limits": {"search": 10},
        "fallback": mask,
    }
    assert out["settings"] == expected
    assert vault_settings(alice) == expected
    # the plugin itself got every secret whole, at its place
    said = call(as_person(alice), "vault.fingerprints", {})["said"]
    assert said["server"] == f"imap.example.test:993 {fingerprint(s['server'])}"
    assert said["backup"] == f"backup.example.test {fingerprint(s['backup'])}"
    assert said["mirrors.1"] == f"b.example.test {fingerprint(s['mirror b'])}"
    assert [said["tokens.0"], said["tokens.1"]] == [fingerprint(s["token 1"]), fingerprint(s["token 2"])]
    assert (said["team_keys.ops"], said["fallback"]) == (fingerprint(s["ops key"]), fingerprint(s["fallback"]))
    # the audit names what changed, never a value
    events = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="set_plugin_settings", outcome="ok")
    assert [t["id"] for t in events.get().targets] == [f"vault.{name}" for name in out["changed"]]
    assert shows_no_secret([e.__dict__ for e in AuditEvent.objects.for_tenant(alice.tenant)])
    # mallory's tenant sees nothing of alice's settings, and its plugin has none of her secrets
    assert vault_settings(mallory) == {}
    assert call(as_person(mallory), "vault.fingerprints", {})["said"]["server"] == ":993 unset"
    assert not AuditEvent.objects.for_tenant(mallory.tenant).filter(operation="set_plugin_settings").exists()


def test_a_masked_secret_sent_back_keeps_its_stored_value_wherever_it_is(
    alice: Person, mallory: Person, installed: list[str]
) -> None:
    s = VAULT_SECRETS
    set_vault(
        alice,
        {
            "server": {"host": "imap.example.test", "password": s["server"]},
            "mirrors": [
                {"host": "a.example.test", "password": s["mirror a"]},
                {"host": "b.example.test", "password": s["mirror b"]},
            ],
            "tokens": [s["token 1"], s["token 2"]],
            "team_keys": {"ops": s["ops key"]},
        },
    )
    set_vault(mallory, {"tokens": ["mallory-token-0123456789"]})
    # what the console shows, sent back with one change: only that change is made
    shown = vault_settings(alice)
    out = set_vault(alice, {**shown, "labels": ["kept"]})
    assert out["changed"] == ["labels"]
    said = call(as_person(alice), "vault.fingerprints", {})["said"]
    assert said["mirrors.0"] == f"a.example.test {fingerprint(s['mirror a'])}"
    assert [said["tokens.0"], said["tokens.1"]] == [fingerprint(s["token 1"]), fingerprint(s["token 2"])]
    assert said["team_keys.ops"] == fingerprint(s["ops key"])

    # the first mirror and token removed: the items that moved name where they were stored
    out = set_vault(
        alice,
        {
            **shown,
            "labels": ["kept"],
            "mirrors": [{"host": "b.example.test", "password": f"{MASK}@/mirrors/1/password"}],
            "tokens": [f"{MASK}@/tokens/1", "tok-three-0123456789"],
        },
    )
    assert out["changed"] == ["mirrors", "tokens"]
    said = call(as_person(alice), "vault.fingerprints", {})["said"]
    assert said["mirrors.0"] == f"b.example.test {fingerprint(s['mirror b'])}" and "mirrors.1" not in said
    assert [said["tokens.0"], said["tokens.1"]] == [fingerprint(s["token 2"]), fingerprint("tok-three-0123456789")]
    assert said["server"] == f"imap.example.test:993 {fingerprint(s['server'])}"

    # a mask that finds no stored secret is refused, never stored as if it were one
    stored = vault_settings(alice)
    for sent, field in (
        ({"tokens": [MASK, MASK, MASK]}, "settings.tokens.2"),
        ({"backup": {"host": "x.example.test", "password": MASK}}, "settings.backup.password"),
        ({"tokens": [f"{MASK}@/server/host"]}, "settings.tokens.0"),  # not a secret
        ({"tokens": [f"{MASK}@/tokens/7"]}, "settings.tokens.0"),
        ({"tokens": [f"{MASK}@tokens"]}, "settings.tokens.0"),
    ):
        error = refusal(as_person(alice), "set_plugin_settings", {"plugin": "vault", "settings": sent}, confirm=True)
        assert (error.code, error.field) == ("INVALID_INPUT", field), sent
        assert "secret" in error.message and shows_no_secret(error.message)
    assert vault_settings(alice) == stored
    # another tenant's mask keeps only its own secret: never alice's
    set_vault(mallory, {"tokens": [MASK]})
    said = call(as_person(mallory), "vault.fingerprints", {})["said"]
    assert said["tokens.0"] == fingerprint("mallory-token-0123456789")
    assert shows_no_secret(vault_settings(mallory)) and vault_settings(mallory)["tokens"] == [MASK]
    error = refusal(
        as_person(mallory),
        "set_plugin_settings",
        {"plugin": "vault", "settings": {"mirrors": [{"host": "m.example.test", "password": MASK}]}},
        confirm=True,
    )
    assert error.field == "settings.mirrors.0.password"


def test_secrets_are_found_in_every_shape_a_schema_may_give_them() -> None:
    secret = {"type": "string", "format": "password"}
    schema = {
        "type": "object",
        "additionalProperties": False,
        "$defs": {
            "Pair": {"type": "object", "properties": {"user": {"type": "string"}, "key": {"$ref": "#/$defs/Key"}}},
            "Key": secret,
        },
        "properties": {
            "inline": {
                "type": "object",
                "properties": {"deep": {"type": "object", "properties": {"pin": secret, "name": {"type": "string"}}}},
            },
            "pairs": {"type": "array", "items": {"$ref": "#/$defs/Pair"}},
            "grid": {"type": "array", "items": {"type": "array", "items": secret}},
            "by_pattern": {"type": "object", "patternProperties": {"^k_": secret}},
            "tuple": {"type": "array", "prefixItems": [{"type": "string"}, secret]},
            "either": {"anyOf": [{"type": "integer"}, secret]},
            "all": {"allOf": [{"$ref": "#/$defs/Pair"}]},
            "hidden": {"type": "object", "writeOnly": True},
            "plain": {"type": "string"},
        },
    }
    values = {
        "inline": {"deep": {"pin": "1234", "name": "n"}},
        "pairs": [{"user": "u", "key": "k1"}, {"user": "v", "key": ""}],
        "grid": [["g1"], ["g2", "g3"]],
        "by_pattern": {"k_one": "p1", "other": "shown"},
        "tuple": ["first", "t2"],
        "either": "e1",
        "all": {"user": "w", "key": "a1"},
        "hidden": {"whole": "h1"},
        "plain": "plain",
        "left_from_an_older_version": "old1",
    }
    mask = MASK
    assert SettingsSchema(schema).masked(values) == {
        "inline": {"deep": {"pin": mask, "name": "n"}},
        "pairs": [{"user": "u", "key": mask}, {"user": "v", "key": ""}],  # an unset secret reads as unset
        "grid": [[mask], [mask, mask]],
        "by_pattern": {"k_one": mask, "other": "shown"},
        "tuple": ["first", mask],
        "either": mask,
        "all": {"user": "w", "key": mask},
        "hidden": mask,
        "plain": "plain",
        "left_from_an_older_version": mask,
    }
    # a recursive schema, and a reference that leads nowhere (masked: the safe mistake)
    tree = {
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {"key": secret, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
            }
        },
        "$ref": "#/$defs/Node",
    }
    assert SettingsSchema(tree).masked({"key": "r", "children": [{"key": "c", "children": [{"key": "d"}]}]}) == {
        "key": mask,
        "children": [{"key": mask, "children": [{"key": mask}]}],
    }
    lost = {"type": "object", "properties": {"x": {"$ref": "#/$defs/Gone"}, "y": {"type": "string"}}}
    assert SettingsSchema(lost).masked({"x": "x1", "y": "y1"}) == {"x": mask, "y": "y1"}


# ---------------------------------------------------------------- the calendar plugin

OUTLOOK = """BEGIN:VCALENDAR
METHOD:REQUEST
PRODID:Microsoft Exchange Server 2010
VERSION:2.0
BEGIN:VTIMEZONE
TZID:W. Europe Standard Time
BEGIN:STANDARD
DTSTART:16010101T030000
TZOFFSETFROM:+0200
TZOFFSETTO:+0100
RRULE:FREQ=YEARLY;INTERVAL=1;BYDAY=-1SU;BYMONTH=10
END:STANDARD
BEGIN:DAYLIGHT
DTSTART:16010101T020000
TZOFFSETFROM:+0100
TZOFFSETTO:+0200
RRULE:FREQ=YEARLY;INTERVAL=1;BYDAY=-1SU;BYMONTH=3
END:DAYLIGHT
END:VTIMEZONE
BEGIN:VEVENT
ORGANIZER;CN=Bob Builder:mailto:bob@contoso.test
ATTENDEE;ROLE=REQ-PARTICIPANT;PARTSTAT=NEEDS-ACTION;RSVP=TRUE;CN=Alice:mailto:{me}
SUMMARY;LANGUAGE=en-US:Quarterly planning
DTSTART;TZID=W. Europe Standard Time:20261210T100000
DTEND;TZID=W. Europe Standard Time:20261210T113000
UID:040000008200E00074C5B7101A82E008-{tag}
SEQUENCE:0
LOCATION;LANGUAGE=en-US:Room 4.12
STATUS:CONFIRMED
END:VEVENT
END:VCALENDAR
"""

GOOGLE = """BEGIN:VCALENDAR
PRODID:-//Google Inc//Google Calendar 70.9054//EN
VERSION:2.0
CALSCALE:GREGORIAN
METHOD:REQUEST
BEGIN:VEVENT
DTSTART:20261211T150000Z
DTEND:20261211T153000Z
RRULE:FREQ=WEEKLY;BYDAY=FR;COUNT=5
ORGANIZER;CN=Carol:mailto:carol@gmail.test
UID:{tag}-weekly@google.com
ATTENDEE;CUTYPE=INDIVIDUAL;ROLE=REQ-PARTICIPANT;PARTSTAT=ACCEPTED;CN=Carol:mailto:carol@gmail.test
ATTENDEE;CUTYPE=INDIVIDUAL;ROLE=REQ-PARTICIPANT;PARTSTAT=NEEDS-ACTION;CN={me}:mailto:{me}
SUMMARY:Weekly sync
SEQUENCE:0
STATUS:CONFIRMED
END:VEVENT
END:VCALENDAR
"""

APPLE = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//Apple Inc.//macOS 15.1//EN
METHOD:REQUEST
BEGIN:VTIMEZONE
TZID:America/New_York
BEGIN:DAYLIGHT
TZOFFSETFROM:-0500
RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=2SU
DTSTART:20070311T020000
TZNAME:EDT
TZOFFSETTO:-0400
END:DAYLIGHT
BEGIN:STANDARD
TZOFFSETFROM:-0400
RRULE:FREQ=YEARLY;BYMONTH=11;BYDAY=1SU
DTSTART:20071104T020000
TZNAME:EST
TZOFFSETTO:-0500
END:STANDARD
END:VTIMEZONE
BEGIN:VEVENT
UID:{tag}-apple
DTSTART;TZID=America/New_York:20261212T090000
DTEND;TZID=America/New_York:20261212T100000
SUMMARY:Dentist
LOCATION:12 Main St
ORGANIZER;CN="Dr. Dee":mailto:dee@icloud.test
ATTENDEE;CN="Alice";PARTSTAT=NEEDS-ACTION:mailto:{me}
SEQUENCE:1
END:VEVENT
END:VCALENDAR
"""

ALL_DAY = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//Example//Holidays//EN
METHOD:PUBLISH
BEGIN:VEVENT
UID:{tag}-holiday
DTSTART;VALUE=DATE:20261224
DTEND;VALUE=DATE:20261225
SUMMARY:Office closed
END:VEVENT
BEGIN:VEVENT
UID:{tag}-floating
DTSTART:20261215T120000
DTEND:20261215T130000
SUMMARY:Lunch (local time)
END:VEVENT
END:VCALENDAR
"""

CANCELLED = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//Example//EN
METHOD:CANCEL
BEGIN:VEVENT
UID:{tag}-cancelled
DTSTART:20261216T090000Z
SUMMARY:Cancelled review
STATUS:CANCELLED
SEQUENCE:2
END:VEVENT
END:VCALENDAR
"""


def invite_mail(tag: str, me: str, key: str, ics: str, *, attached: bool = False) -> bytes:
    message = EmailMessage()
    message["From"] = "organizer@example.test"
    message["To"] = me
    message["Subject"] = f"Invitation: {key}"
    message["Message-ID"] = f"<{tag}-{key}@example.test>"
    message["Date"] = f"Mon, {1 + list(CALENDARS).index(key):02d} Dec 2026 09:00:00 +0000"
    message.set_content("You are invited.")
    text = ics.format(me=me, tag=tag).replace("\n", "\r\n")
    if attached:
        message.add_attachment(text.encode(), maintype="application", subtype="ics", filename="invite.ics")
    else:
        message.add_alternative(text, subtype="calendar", params={"method": "REQUEST"})
    return bytes(message)


CALENDARS = {"outlook": OUTLOOK, "google": GOOGLE, "apple": APPLE, "all_day": ALL_DAY, "cancelled": CANCELLED}


def load_invites(p: Person, tmp: Path, tag: str) -> dict[str, str]:
    mails = [invite_mail(tag, p.user.email, key, ics, attached=key == "apple") for key, ics in CALENDARS.items()]
    import_mail(
        tenant=p.tenant, workspace=p.workspace, account_name="Personal", path=write_mbox(tmp / f"{tag}.mbox", mails)
    )
    ids = dict(Message.objects.for_tenant(p.tenant).values_list("message_id", "pk"))
    return {key: str(ids[f"{tag}-{key}@example.test"]) for key in CALENDARS}


@pytest.fixture
def calendar() -> None:
    if plugin_runtime.runtime("calendar") is None:
        pytest.fail("the calendar plugin is not installed (make test installs plugins/oaken-calendar)")


def test_the_calendar_plugin_reads_real_world_invites_and_only_its_tenants(
    alice: Person, mallory: Person, calendar: None, tmp_path: Path
) -> None:
    mine, theirs = load_invites(alice, tmp_path, "alice"), load_invites(mallory, tmp_path, "mallory")
    account = call(as_person(alice), "list_accounts")["accounts"][0]["id"]
    found = call(as_person(alice), "calendar.list_invites", {"account_id": account})["invites"]
    by_uid = {invite["uid"]: invite for invite in found}
    assert {invite["message_id"] for invite in found} == set(mine.values())
    assert not {invite["message_id"] for invite in found} & set(theirs.values())

    outlook = by_uid["040000008200E00074C5B7101A82E008-alice"]
    assert (outlook["title"], outlook["organizer"], outlook["organizer_name"]) == (
        "Quarterly planning",
        "bob@contoso.test",
        "Bob Builder",
    )
    assert outlook["start"] == "2026-12-10T10:00:00+01:00" and outlook["end"] == "2026-12-10T11:30:00+01:00"
    assert outlook["location"] == "Room 4.12" and outlook["method"] == "REQUEST"
    assert outlook["attendees"] == [{"address": alice.user.email, "name": "Alice", "response": "NEEDS-ACTION"}]

    google = by_uid["alice-weekly@google.com"]
    assert google["start"] == "2026-12-11T15:00:00+00:00" and google["recurrence"] == "FREQ=WEEKLY;COUNT=5;BYDAY=FR"
    assert [a["response"] for a in google["attendees"]] == ["ACCEPTED", "NEEDS-ACTION"]

    apple = by_uid["alice-apple"]  # sent as an .ics attachment
    assert apple["start"] == "2026-12-12T09:00:00-05:00" and apple["time_zone"] == "America/New_York"
    assert apple["organizer_name"] == "Dr. Dee" and apple["sequence"] == 1

    holiday, floating = by_uid["alice-holiday"], by_uid["alice-floating"]
    assert (holiday["all_day"], holiday["start"], holiday["end"]) == (True, "2026-12-24", "2026-12-25")
    assert (floating["all_day"], floating["start"], floating["time_zone"]) == (False, "2026-12-15T12:00:00", None)
    assert by_uid["alice-cancelled"]["method"] == "CANCEL"

    one = call(as_person(alice), "calendar.get_invite", {"message_id": mine["google"]})["invites"]
    assert [invite["uid"] for invite in one] == ["alice-weekly@google.com"]
    # another tenant's message is not found; a limit is kept
    error = refusal(as_person(alice), "calendar.get_invite", {"message_id": theirs["google"]})
    assert error.code == "NOT_FOUND"
    assert len(call(as_person(alice), "calendar.list_invites", {"account_id": account, "limit": 2})["invites"]) == 2
    # settings: cancelled invites can be left out
    dispatch(
        as_person(alice),
        Door.UI,
        "set_plugin_settings",
        {"plugin": "calendar", "settings": {"include_cancelled": False}},
        confirm=True,
    )
    kept = call(as_person(alice), "calendar.list_invites", {"account_id": account})["invites"]
    assert "alice-cancelled" not in {invite["uid"] for invite in kept}
    assert "mallory-cancelled" in {
        i["uid"]
        for i in call(as_person(mallory), "calendar.list_invites", {"account_id": _account(mallory)})["invites"]
    }


def _account(p: Person) -> str:
    return str(call(as_person(p), "list_accounts")["accounts"][0]["id"])


def test_an_agent_meets_the_calendar_off_and_fenced_once_on(alice: Person, calendar: None, tmp_path: Path) -> None:
    load_invites(alice, tmp_path, "alice")
    agent = as_agent(alice)
    assert "calendar.list_invites" not in offered(agent)
    expose(alice, "plugin:calendar")
    assert {"calendar.list_invites", "calendar.get_invite"} <= offered(agent)
    found = call(agent, "calendar.list_invites", {"account_id": _account(alice)})["invites"]
    assert found
    schema = plugins.registry.get("calendar.list_invites").output_model.model_json_schema()  # type: ignore[union-attr]
    invite = schema["properties"]["invites"]["items"]["properties"]
    assert invite["title"]["x-untrusted"] is True and invite["message_id"]["x-untrusted"] is True
    # a restricted agent names an account
    narrow = as_agent(alice, workspaces=("nowhere",))
    assert refusal(narrow, "calendar.list_invites", {"account_id": _account(alice)}).code in {
        "OUT_OF_SCOPE",
        "NOT_FOUND",
    }


# ---------------------------------------------------------------- the sandbox: fails closed, and as another user


def test_where_the_sandbox_cannot_be_made_no_plugin_loads_and_an_admin_reads_why(
    alice: Person, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a machine without bubblewrap: a PATH holding every other tool
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("prlimit", "setpriv"):
        (tools / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    monkeypatch.setenv("PATH", str(tools))
    monkeypatch.setattr(sandbox, "_checked", {})
    with caplog.at_level(logging.ERROR, logger="oaken.plugins"):
        loaded = plugins.load_plugins([PLUGINS_DIR / "test-plugins"])
    try:
        assert loaded == []
        assert not [op for op in plugins.registry if op.plugin in TEST_PLUGINS]
        assert any("no plugin is loaded" in r.getMessage() and "bwrap" in r.getMessage() for r in caplog.records)
        listed = call(as_person(alice), "list_plugins")
        assert "bwrap is not installed" in listed["problem"]
        assert {r["name"] for r in listed["refused"]} == set(TEST_PLUGINS)
    finally:
        monkeypatch.undo()
        sandbox._checked.clear()
        plugins.status.problem = ""
        for name in TEST_PLUGINS:
            plugins.unload_plugin(name)


def test_opting_out_of_the_sandbox_is_said_loudly(
    alice: Person, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(settings, "PLUGIN_SANDBOX", "none")
    with caplog.at_level(logging.WARNING, logger="oaken.plugins"):
        loaded = plugins.load_plugins([PLUGINS_DIR / "test-plugins"])
    try:
        assert loaded == list(TEST_PLUGINS)
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("WITHOUT a sandbox" in line for line in warned)
        assert call(as_person(alice), "list_plugins")["sandbox"] == "none"
    finally:
        for name in TEST_PLUGINS:
            plugins.unload_plugin(name)


_AS_ANOTHER_USER = """
import json, os, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from pathlib import Path
from apps.operations import sandbox
env = sandbox.Environment.at(Path(sys.argv[3]))
limits = sandbox.Limits(memory_mb=512, tasks=8, files=32, file_mb=1, cpu_seconds=10)
inside = '''
import json, os, socket
tried = {}
for name, attempt in (("socket", socket.socket), ("fork", os.fork), ("write /usr", lambda: open("/usr/x", "w"))):
    try:
        attempt()
        tried[name] = "worked"
    except OSError as exc:
        tried[name] = type(exc).__name__
print(json.dumps({"tried": tried, "net": os.readlink("/proc/self/ns/net")}), flush=True)
import time; time.sleep(5)
'''
started = sandbox.spawn("bwrap", env, [], limits, ["-c", inside], 10)
said = json.loads(started.process.stdout.readline())
status = dict(line.split(":", 1) for line in Path(f"/proc/{started.pid}/status").read_text().splitlines())
said.update(uid=status["Uid"].split(), caps=status["CapEff"].strip(), no_new_privs=status["NoNewPrivs"].strip())
said.update(seccomp=status["Seccomp"].strip(), my_net=os.readlink("/proc/self/ns/net"))
said.update(problem=sandbox.unavailable("bwrap", env))
started.process.kill()
print(json.dumps(said))
"""


@pytest.fixture
def as_nobody() -> Iterator[Callable[[str], list[str]]]:
    """The command that runs a Python script as `nobody`, as an Oaken that is not root would be, with the system's
    Python (one `nobody` can read), Oaken's source on its path, and a plugin environment made from it; the script
    gets the source folder, a folder holding pyseccomp and the environment as arguments."""
    if os.geteuid() != 0 or not Path("/usr/bin/python3").exists() or shutil.which("setpriv") is None:
        pytest.skip("needs root (to become nobody) and the system's python3")
    import pyseccomp

    place = Path(tempfile.mkdtemp(prefix="oaken-nonroot-"))
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(place / "env")], check=True)
    (place / "lib").mkdir()
    shutil.copy(pyseccomp.__file__, place / "lib" / "pyseccomp.py")
    subprocess.run(["chmod", "-R", "a+rX", str(place)], check=True)
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c"]
    yield lambda script: [*nobody, script, str(settings.BASE_DIR), str(place / "lib"), str(place / "env")]
    shutil.rmtree(place, ignore_errors=True)


@pytest.mark.slow
def test_an_oaken_that_is_not_root_sandboxes_its_plugins_in_a_user_namespace(
    as_nobody: Callable[[str], list[str]],
) -> None:
    """The production image runs Oaken as a user of its own: bwrap then maps the sandbox's user in a user
    namespace."""
    run = subprocess.run(as_nobody(_AS_ANOTHER_USER), capture_output=True, text=True, timeout=60, cwd="/")
    assert run.returncode == 0, run.stderr[-2000:]
    said = json.loads(run.stdout.strip().splitlines()[-1])
    assert said["problem"] is None
    assert said["uid"] == ["65534"] * 4  # as seen from outside: the unprivileged user, never root
    assert said["caps"] == "0000000000000000" and said["no_new_privs"] == "1" and said["seccomp"] == "2"
    assert said["tried"] == {"socket": "PermissionError", "fork": "PermissionError", "write /usr": "OSError"}
    assert said["net"] != said["my_net"]  # a network namespace of its own


_STARTS_ONE_AND_WAITS = """
import signal, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from pathlib import Path
from apps.operations import sandbox
env = sandbox.Environment.at(Path(sys.argv[3]))
limits = sandbox.Limits(memory_mb=512, tasks=8, files=32, file_mb=1, cpu_seconds=10)
started = sandbox.spawn("bwrap", env, [], limits, ["-c", "import time; print('up', flush=True); time.sleep(60)"], 10)
started.process.stdout.readline()
started.signal(signal.SIGSTOP)  # idle in a pool
print(started.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.parametrize("user", ["root", "nobody"])
def test_a_plugins_process_ends_with_the_oaken_process_that_started_it_even_stopped(
    user: str, request: pytest.FixtureRequest
) -> None:
    """An Oaken process killed outright (SIGKILL, an OOM kill) leaves no plugin process behind, not even one stopped
    between calls."""
    if user == "root":
        if os.geteuid() != 0:
            pytest.skip("Oaken runs as another user here")
        env = str(plugins.environment().root)
        command = [sys.executable, "-c", _STARTS_ONE_AND_WAITS, str(settings.BASE_DIR), str(settings.BASE_DIR), env]
    else:
        command = request.getfixturevalue("as_nobody")(_STARTS_ONE_AND_WAITS)
    oaken = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        assert oaken.stdout is not None
        plugin = psutil.Process(int(oaken.stdout.readline()))
        assert eventually(lambda: plugin.status() == psutil.STATUS_STOPPED)
    finally:
        oaken.kill()
        oaken.wait()
    assert eventually(lambda: not psutil.pid_exists(plugin.pid) or plugin.status() == psutil.STATUS_ZOMBIE, 5)


# ---------------------------------------------------------------- what an honest plugin can do


@pytest.fixture
def mail_plugins() -> Iterator[list[str]]:
    loaded = plugins.load_plugins([PLUGINS_DIR / "mail-plugins"])
    yield loaded
    for name in ("reader", "notes"):
        plugins.unload_plugin(name)


def _plain_mail(tag: str, sender: str, first_line: str, n: int) -> bytes:
    message = EmailMessage()
    message["From"] = f"{tag.title()} Sender <{sender}>"
    message["To"] = "someone@example.test"
    message["Subject"] = f"{tag} mail {n}"
    message["Message-ID"] = f"<{tag}-{n}@example.test>"
    message["Date"] = f"Mon, {1 + n:02d} Nov 2026 09:00:00 +0000"
    message["List-Id"] = f"<{tag}.list.example.test>"
    message.set_content(f"{first_line}\nThe rest of it.")
    return bytes(message)


def test_a_plugin_reads_a_plain_messages_own_text_and_headers_in_its_callers_reach(
    alice: Person, mallory: Person, mail_plugins: list[str], tmp_path: Path
) -> None:
    assert mail_plugins == ["notes", "reader"]
    for p, tag in ((alice, "alice"), (mallory, "mallory")):
        mails = [_plain_mail(tag, f"{tag}-friend@example.test", f"Hello from {tag} {n}", n) for n in range(3)]
        import_mail(
            tenant=p.tenant, workspace=p.workspace, account_name="Plain", path=write_mbox(tmp_path / tag, mails)
        )
    seen = call(as_person(alice), "reader.senders", {"account_id": _account(alice)})["seen"]
    # newest message first; for each its headers, then its text
    assert [(s["kind"], s["first_line"]) for s in seen] == [
        (kind, line)
        for n in (2, 1, 0)
        for kind, line in (
            ("headers", "From: Alice Sender <alice-friend@example.test>"),
            ("text", f"Hello from alice {n}"),
        )
    ]
    assert {s["sender"] for s in seen} == {"alice-friend@example.test"}
    # the limit counts parts; another tenant's account is not found
    assert len(call(as_person(alice), "reader.senders", {"account_id": _account(alice), "limit": 3})["seen"]) == 3
    assert refusal(as_person(alice), "reader.senders", {"account_id": _account(mallory)}).code == "NOT_FOUND"
    mine = {s["message_id"] for s in seen}
    assert not mine & {
        s["message_id"] for s in call(as_person(mallory), "reader.senders", {"account_id": _account(mallory)})["seen"]
    }
    # reading never marks anything read
    assert not Message.objects.for_tenant(alice.tenant).filter(read=True).exists()


def test_a_plugins_change_is_confirmed_by_a_person_and_proposed_to_an_agent(
    alice: Person, mallory: Person, mail_plugins: list[str]
) -> None:
    me = as_person(alice)
    error = refusal(me, "notes.keep", {"text": "buy milk"})
    assert error.code == "CONFIRMATION_REQUIRED"
    assert call(me, "notes.keep", {"text": "buy milk"}, confirm=True) == {"kept": "buy milk"}
    expose(alice, "plugin:notes")
    agent = as_agent(alice)
    proposal = refusal(agent, "notes.keep", {"text": "call Bob"}).proposal
    assert proposal is not None and proposal["changes"][0]["after"] == {"plan": "keep a note of 8 characters"}
    kept = dispatch(agent, Door.MCP, "notes.keep", {"text": "call Bob"}, confirmation_token=proposal["token"])
    assert kept.output == {"kept": "call Bob"}
    events = AuditEvent.objects.for_tenant(alice.tenant).filter(operation="notes.keep", outcome="ok")
    assert events.count() == 2
    assert not AuditEvent.objects.for_tenant(mallory.tenant).filter(operation="notes.keep").exists()


def test_a_slow_plugins_calls_beyond_its_bound_are_refused_at_once_not_queued(
    alice: Person, mallory: Person, installed: list[str], bounds: dict[str, int]
) -> None:
    bounds["PLUGIN_CALLS_IN_FLIGHT"] = 1
    sleeper = plugin_runtime.runtime("sleeper")
    assert sleeper is not None
    # a slow call in flight (another web thread's: asked of the bridge itself, whose bound the gate's call meets)
    nap = {"kind": "call", "operation": "nap", "input": {"seconds": 3}, "settings": {}, "now": "2026-12-01T00:00:00"}

    def slow_call() -> None:
        with sleeper.calling():
            sleeper.ask({**nap, "parts": []}, tenant=str(mallory.tenant.pk))

    slow = threading.Thread(target=slow_call)
    slow.start()
    try:
        assert eventually(lambda: sleeper._in_flight == 1)
        started = time.monotonic()
        error = refusal(as_person(alice), "sleeper.nap", {"seconds": 0})
        assert error.code == "SERVICE_UNAVAILABLE" and error.retry_after == 1
        assert time.monotonic() - started < 1  # refused, not queued behind the slow call
        # another plugin is not held up by it
        assert call(as_person(alice), "sick.hello", {}) == {"said": "hello"}
    finally:
        slow.join()
    assert call(as_person(alice), "sleeper.nap", {"seconds": 0})["said"].startswith("slept 0 s")


def test_a_tenants_calls_never_share_a_process_with_another_tenants(
    alice: Person, mallory: Person, installed: list[str]
) -> None:
    said = {
        name: {call(as_person(p), "sleeper.nap", {"seconds": 0})["said"].split()[-1] for _ in range(4)}
        for name, p in (("alice", alice), ("mallory", mallory))
    }
    assert len(said["alice"]) == 1 and len(said["mallory"]) == 1  # a process is kept for each tenant
    assert not said["alice"] & said["mallory"]


def test_a_process_that_stops_reading_its_requests_is_cut_at_the_timeout(alice: Person) -> None:
    """A request larger than a pipe holds, to a process that never reads: Oaken's write must not wait past the
    call's timeout (a web thread would hang)."""
    ready = '{"id": "ready", "ok": true, "result": "ready"}'
    never_reads = f"import time; print({ready!r}, flush=True); time.sleep(60)"
    env = plugins.environment()
    limits = plugin_runtime.limits()
    started = sandbox.spawn(settings.PLUGIN_SANDBOX, env, [], limits, ["-c", never_reads], 10)
    process = PluginProcess(("test", str(alice.tenant.pk)), started, 10)
    began = time.monotonic()
    with pytest.raises(PluginFailure, match="did not read its request in time"):
        process.ask({"kind": "call", "settings": {"big": "x" * (4 << 20)}}, timeout=1, cpu_seconds=5)
    assert time.monotonic() - began < 5
    process.kill()
    assert not process.alive


def test_a_process_outlives_the_thread_that_started_it(alice: Person, installed: list[str]) -> None:
    """bwrap dies with the thread that started it (PR_SET_PDEATHSIG): a pooled process started by a request's or
    a health check's thread must not end with that thread."""
    sleeper = plugin_runtime.runtime("sleeper")
    assert sleeper is not None
    nap = {"kind": "call", "operation": "nap", "input": {"seconds": 0}, "settings": {}, "now": "2026-12-01T00:00:00"}
    said: list[str] = []
    thread = threading.Thread(target=lambda: said.append(sleeper.ask({**nap, "parts": []}, tenant="outliving")["said"]))
    thread.start()
    thread.join()
    time.sleep(0.2)
    again = sleeper.ask({**nap, "parts": []}, tenant="outliving")["said"]
    assert said and said[0].split()[-1] == again.split()[-1]  # the same process answered


def test_a_plugin_left_in_oakens_own_environment_is_not_loaded_and_the_admin_is_told(
    alice: Person, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older Oaken had plugins installed in its own environment; there, their code runs in Oaken's processes."""
    old = EntryPoint(name="legacy", value="oaken_legacy:plugin", group=plugins.ENTRY_POINT_GROUP)
    monkeypatch.setattr(plugins, "entry_points", lambda group: [old] if group == plugins.ENTRY_POINT_GROUP else [])
    try:
        plugins.load_plugins()
        refused = {r["name"]: r["reason"] for r in call(as_person(alice), "list_plugins")["refused"]}
        assert "Oaken's own environment" in refused["legacy"]
        assert plugin_runtime.runtime("legacy") is None and plugin_runtime.runtime("calendar") is not None
        assert "calendar" not in refused  # loaded already: left as it is
    finally:
        plugins.status.refused.pop("legacy", None)
