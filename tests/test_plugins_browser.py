"""The console's Plugins page in headless Chromium: a plugin's health and operations, and its settings edited
from the plugin's schema (nested models, lists of words, of secrets and of models, JSON for the rest), a refusal
shown beside its setting in words, a secret never shown back, wherever it is; how plugins run (with or without a
sandbox) and which were refused, and why; another tenant's settings stay its own."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from apps.operations import plugins
from tests.browser import look
from tests.callers import as_person, call
from tests.conftest import Person
from tests.test_console_browser import _sign_in
from tests.test_plugins import (
    PLUGINS_DIR,
    VAULT_SECRETS,
    fingerprint,
    installed,  # noqa: F401 - the fixture installing the test plugins
)

if TYPE_CHECKING:
    from playwright.sync_api import Page

SECRETS = {**VAULT_SECRETS, "main": VAULT_SECRETS["server"]}
LIST_PLUGINS = """async () => {
  const token = document.querySelector('meta[name="csrf-token"]').content;
  const answer = await fetch("/api/v1/ops/list_plugins", {method: "POST", body: "{}",
    headers: {"Content-Type": "application/json", "X-CSRFToken": token}});
  return answer.text();
}"""


@pytest.mark.slow
@pytest.mark.usefixtures("installed")
def test_an_admin_edits_a_plugins_settings_from_its_schema(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person
) -> None:
    from playwright.sync_api import expect

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/")
    page.click("nav >> text=Plugins")
    page.wait_for_url("**/plugins")
    keyed = page.locator('section[data-plugin="keyed"]')
    expect(keyed.locator("[data-health]")).to_have_text("Working.")
    expect(keyed.locator('[data-operation="keyed.whoami"]')).to_contain_text("not offered")

    # a value the schema refuses: said beside the setting, in words, nothing saved, no dialog
    keyed.locator('input[name="region"]').fill("mars")
    keyed.locator("button[type=submit]").click()
    problem = page.locator("#setting-keyed-region--problem")
    expect(problem).to_have_text("Region does not have the expected form.")
    expect(page.locator("body")).not_to_contain_text("settings.region")
    assert call(as_person(alice), "keyed.whoami", {}) == {"said": "eu without a key"}

    # a key and a region, confirmed
    keyed.locator('input[name="region"]').fill("us")
    keyed.locator('input[name="api_key"]').fill("sk-browser-0123456789")
    keyed.locator("button[type=submit]").click()
    expect(page.locator("#confirm-dialog")).to_be_visible()
    # the settings that change, in words since issue 37 (it printed "keyed.api_key")
    expect(page.locator("#confirm-dialog")).to_contain_text("“api key”")
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_contain_text("The settings of keyed are saved.")
    assert call(as_person(alice), "keyed.whoami", {}) == {"said": "us with a key"}

    # shown again: the key is set, never shown; saving again with it left empty keeps it
    page.reload()
    key = page.locator('section[data-plugin="keyed"] input[name="api_key"]')
    expect(key).to_have_value("")
    expect(key).to_have_attribute("placeholder", "set (leave empty to keep it)")
    assert "sk-browser" not in page.content()
    page.locator('section[data-plugin="keyed"] input[name="region"]').fill("eu")
    page.locator('section[data-plugin="keyed"] button[type=submit]').click()
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_contain_text("saved")
    assert call(as_person(alice), "keyed.whoami", {}) == {"said": "eu with a key"}
    # mallory's tenant has its own settings
    assert call(as_person(mallory), "keyed.whoami", {}) == {"said": "eu without a key"}
    look(page, "plugins")


def _fingerprints(p: Person) -> dict[str, str]:
    said: dict[str, str] = call(as_person(p), "vault.fingerprints", {})["said"]
    return said


@pytest.mark.slow
@pytest.mark.usefixtures("installed")
def test_an_admin_edits_nested_and_list_settings_and_no_secret_is_shown_back(
    browser_page: Page, live_server: Any, alice: Person, mallory: Person
) -> None:
    from playwright.sync_api import expect

    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/plugins")
    vault = page.locator('section[data-plugin="vault"]')
    main = vault.get_by_role("group", name="Main server", exact=True)
    main.get_by_label("Host name").fill("imap.example.test")
    main.get_by_label("Port").fill("143")
    main.get_by_label("Password").fill(SECRETS["main"])
    # an optional server, set behind its checkbox
    backup = vault.get_by_role("group", name="Backup server", exact=True)
    expect(backup.get_by_label("Host name")).to_be_hidden()
    backup.get_by_label("Set backup server").check()
    backup.get_by_label("Host name").fill("backup.example.test")
    backup.get_by_label("Password").fill(SECRETS["backup"])
    # a list of servers: two rows, each a fieldset of its own
    for index, (host, secret) in enumerate((("a.example.test", "mirror a"), ("b.example.test", "mirror b")), start=1):
        vault.get_by_role("button", name="Add to mirrors").click()
        row = vault.get_by_role("group", name=f"Mirrors {index}", exact=True)
        expect(row.get_by_label("Host name")).to_be_focused()
        row.get_by_label("Host name").fill(host)
        row.get_by_label("Password").fill(SECRETS[secret])
    # a list of secrets, and a list of words added with the keyboard alone
    for index, secret in enumerate((SECRETS["token 1"], SECRETS["token 2"]), start=1):
        vault.get_by_role("button", name="Add a row to tokens").click()
        vault.get_by_label(f"Tokens {index}", exact=True).fill(secret)
    vault.get_by_role("button", name="Add a row to labels").focus()
    page.keyboard.press("Enter")
    expect(vault.get_by_label("Labels 1", exact=True)).to_be_focused()
    page.keyboard.type("work")
    page.keyboard.press("Tab")
    expect(vault.get_by_role("button", name="Remove labels 1")).to_be_focused()
    retry = vault.get_by_role("group", name="Retry", exact=True)
    retry.get_by_label("Attempts").fill("5")
    retry.get_by_label("Gentle").uncheck()
    # dicts of free keys are written as JSON; JSON that does not parse is said beside it, never sent nor echoed
    vault.get_by_label("Team Keys", exact=True).fill(json.dumps({"ops": SECRETS["ops key"]}))
    vault.get_by_label("Limits", exact=True).fill('{"search": 10,')
    vault.locator("button[type=submit]").click()
    limits_problem = page.locator("#setting-vault-limits--problem")
    expect(limits_problem).to_have_text("Limits is not valid JSON: check its brackets, commas and quotes.")
    expect(vault.get_by_label("Limits", exact=True)).to_be_focused()
    expect(page.locator("#confirm-dialog")).to_be_hidden()
    # the server's refusals: beside the JSON it found wrong, and beside a field nested in a list's row, in words
    limits = vault.get_by_label("Limits", exact=True)
    limits.fill('{"search": "ten"}')
    vault.locator("button[type=submit]").click()
    expect(limits_problem).to_have_text("Limits has the wrong type.")
    expect(page.locator("#notice")).to_have_text("Nothing was saved: Limits has the wrong type.")
    limits.fill('{"search": 10}')
    mirror_2 = vault.get_by_role("group", name="Mirrors 2", exact=True)
    mirror_2.get_by_label("Host name").fill("Bad Host!")
    vault.locator("button[type=submit]").click()
    expect(mirror_2.locator(".problem:not([hidden])")).to_have_text(
        "Host name (Mirrors 2) does not have the expected form."
    )
    expect(limits_problem).to_be_hidden()
    expect(page.locator("#confirm-dialog")).to_be_hidden()
    assert "Bad Host" not in (page.locator("#notice").text_content() or "")
    mirror_2.get_by_label("Host name").fill("b.example.test")
    vault.locator("button[type=submit]").click()
    expect(page.locator("#confirm-dialog")).to_contain_text("“mirrors”")  # in words since issue 37
    expect(page.locator("#confirm-dialog")).to_contain_text("“server password”")
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_contain_text("The settings of vault are saved.")
    said = _fingerprints(alice)
    assert said["server"] == f"imap.example.test:143 {fingerprint(SECRETS['main'])}"
    assert said["backup"] == f"backup.example.test {fingerprint(SECRETS['backup'])}"
    assert said["mirrors.0"] == f"a.example.test {fingerprint(SECRETS['mirror a'])}"
    assert said["mirrors.1"] == f"b.example.test {fingerprint(SECRETS['mirror b'])}"
    assert [said["tokens.0"], said["tokens.1"]] == [fingerprint(SECRETS["token 1"]), fingerprint(SECRETS["token 2"])]
    assert (said["labels"], said["retry"], said["limits"]) == ("work", "5 hard", "search=10")
    assert said["team_keys.ops"] == fingerprint(SECRETS["ops key"])

    # shown again: no secret reaches the page, nested or in a list; each is "set", its input empty
    page.reload()
    expect(page.locator("#notice")).to_be_hidden()
    listed = page.evaluate(LIST_PLUGINS)  # what the page is sent, as it asks for it
    assert "vault" in listed and not [name for name, secret in SECRETS.items() if secret in listed]
    vault = page.locator('section[data-plugin="vault"]')
    mirror_2 = vault.get_by_role("group", name="Mirrors 2", exact=True)
    expect(mirror_2.get_by_label("Host name")).to_have_value("b.example.test")
    expect(mirror_2.get_by_label("Password")).to_have_value("")
    expect(mirror_2.get_by_label("Password")).to_have_attribute("placeholder", "set (leave empty to keep it)")
    expect(vault.get_by_label("Tokens 2", exact=True)).to_have_value("")
    expect(vault.get_by_label("Team Keys", exact=True)).to_have_value('{\n  "ops": "********"\n}')
    shown = page.evaluate("[...document.querySelectorAll('input, textarea')].map((e) => e.value).join(' ')")
    shown += page.locator("body").inner_text()
    assert not [name for name, secret in SECRETS.items() if secret in shown]
    look(page, "plugins-settings")

    # the first mirror and the first token removed: the rows that moved up keep their own secrets
    vault.get_by_role("button", name="Remove mirrors 1").click()
    expect(vault.get_by_role("group", name="Mirrors 1", exact=True).get_by_label("Host name")).to_have_value(
        "b.example.test"
    )
    vault.get_by_role("button", name="Remove tokens 1").click()
    vault.locator("button[type=submit]").click()
    page.click("#confirm-yes")
    expect(page.locator("#notice")).to_contain_text("The settings of vault are saved.")
    said = _fingerprints(alice)
    assert said["mirrors.0"] == f"b.example.test {fingerprint(SECRETS['mirror b'])}" and "mirrors.1" not in said
    assert said["tokens.0"] == fingerprint(SECRETS["token 2"]) and "tokens.1" not in said
    assert said["server"] == f"imap.example.test:143 {fingerprint(SECRETS['main'])}"
    assert said["team_keys.ops"] == fingerprint(SECRETS["ops key"])
    # mallory's tenant: none of alice's settings, its plugin none of her secrets
    theirs = {p["name"]: p for p in call(as_person(mallory), "list_plugins")["plugins"]}["vault"]["settings"]
    assert theirs == {}
    assert _fingerprints(mallory)["server"] == ":993 unset" and "mirrors.0" not in _fingerprints(mallory)


@pytest.mark.slow
def test_the_page_says_how_plugins_run_and_which_were_refused_and_why(
    browser_page: Page, live_server: Any, alice: Person, monkeypatch: pytest.MonkeyPatch
) -> None:
    from playwright.sync_api import expect

    # what list_plugins reads, put back after the test
    monkeypatch.setattr(plugins.status, "sandbox", "none")
    monkeypatch.setattr(plugins.status, "problem", "")
    twins = {"twin", "open_input", "unpreviewed", "misnamed", "missing", "fine"}
    try:
        plugins.load_plugins([PLUGINS_DIR / "twin-plugins", PLUGINS_DIR / "broken-plugins"])
        monkeypatch.setattr(plugins.status, "sandbox", "none")  # as OAKEN_PLUGIN_SANDBOX=none sets it
        page = browser_page
        _sign_in(page, alice, live_server.url)
        page.goto("/plugins")
        warning = page.locator('[data-sandbox="none"]')
        expect(warning).to_contain_text("Plugins run without a sandbox.")
        expect(warning).to_contain_text("developing plugins only")
        expect(page.get_by_role("heading", name="Refused plugins")).to_be_visible()
        expect(page.locator('[data-refused="twin"]')).to_have_text(
            "twin: 2 packages claim the name twin (oaken-twin-a, oaken-twin-b): neither is loaded"
        )
        expect(page.locator('[data-refused="open_input"]')).to_contain_text("extra fields")
        expect(page.locator('section[data-plugin="fine"] [data-health]')).to_have_text("Working.")
        expect(page.locator('section[data-plugin="twin"]')).to_have_count(0)
        expect(page.locator("[data-problem]")).to_have_count(0)
        look(page, "plugins-refused")

        # where the sandbox cannot be made, no plugin is loaded, and the page says why
        for name in twins:
            plugins.unload_plugin(name)
        monkeypatch.setattr(
            plugins.sandbox, "unavailable", lambda mode, env: "bwrap is not installed (the bubblewrap package)"
        )
        monkeypatch.setattr(plugins.settings, "PLUGIN_SANDBOX", "bwrap")
        assert plugins.load_plugins([PLUGINS_DIR / "broken-plugins"]) == []
        page.reload()
        expect(page.locator('[data-sandbox="none"]')).to_have_count(0)
        expect(page.locator("[data-problem]")).to_have_text(
            "No plugin could be loaded: the plugin sandbox cannot be made here: "
            "bwrap is not installed (the bubblewrap package)."
        )
        expect(page.locator('[data-refused="fine"]')).to_have_text("fine: the sandbox cannot be made here")
        expect(page.locator('section[data-plugin="fine"]')).to_have_count(0)
        look(page, "plugins-no-sandbox")
    finally:
        for name in twins:
            plugins.unload_plugin(name)


# every shape the form knows, and some it edits as JSON: what it reads back is what it was given
SHAPES = {
    "type": "object",
    "$defs": {
        "Pair": {
            "type": "object",
            "properties": {"user": {"type": "string"}, "key": {"type": "string", "format": "password"}},
        },
        "Mode": {"enum": ["fast", "safe"], "type": "string"},
    },
    "properties": {
        "mode": {"$ref": "#/$defs/Mode"},
        "maybe_mode": {"anyOf": [{"$ref": "#/$defs/Mode"}, {"type": "null"}], "default": None},
        "modes": {"type": "array", "items": {"$ref": "#/$defs/Mode"}},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "old_style": {"allOf": [{"$ref": "#/$defs/Pair"}], "description": "A reference with words beside it."},
        "pairs": {"type": "array", "items": {"$ref": "#/$defs/Pair"}},
        "ratio": {"type": ["number", "null"]},
        "grid": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
        "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "flag": {"type": "boolean"},
    },
}
SHAPES_VALUES = {
    "mode": "safe",
    "maybe_mode": None,
    "modes": ["fast", "safe", "fast"],
    "note": "hello",
    "old_style": {"user": "u", "key": "********"},
    "pairs": [{"user": "a", "key": "********"}, {"user": "b", "key": "********"}],
    "ratio": 0.5,
    "grid": [[1, 2], [3]],
    "either": "x",
    "flag": True,
}
READ_BACK = """async ([schema, values, removeFirstPair]) => {
  const page = document.querySelector('script[type=module][src*="pages/plugins.js"]').src;
  const url = page.replace("pages/plugins.js", "schema_form.js");
  const { SchemaForm } = await import(url);
  const fields = new SchemaForm("setting-shapes", schema);
  const form = document.createElement("form");
  form.append(...fields.build(values));
  document.querySelector("main").append(form);
  if (removeFirstPair) form.querySelector('button[aria-label="Remove pairs 1"]').click();
  const kinds = Object.fromEntries([...form.querySelectorAll("[data-kind]")].map((e) => [e.name, e.dataset.kind]));
  return { values: fields.read(), kinds };
}"""


@pytest.mark.slow
def test_the_settings_form_reads_back_every_shape_it_was_given(
    browser_page: Page, live_server: Any, alice: Person
) -> None:
    page = browser_page
    _sign_in(page, alice, live_server.url)
    page.goto("/plugins")
    out = page.evaluate(READ_BACK, [SHAPES, SHAPES_VALUES, False])
    assert out["values"] == SHAPES_VALUES
    assert out["kinds"] == {
        "mode": "choice",
        "maybe_mode": "choice",
        "modes.0": "choice",
        "modes.1": "choice",
        "modes.2": "choice",
        "note": "text",
        "old_style.user": "text",
        "old_style.key": "secret",
        "pairs.0.user": "text",
        "pairs.0.key": "secret",
        "pairs.1.user": "text",
        "pairs.1.key": "secret",
        "ratio": "number",
        "grid": "json",
        "either": "json",
        "flag": "boolean",
    }
    # a row removed: the one that moved up names where its secret is stored
    out = page.evaluate(READ_BACK, [SHAPES, SHAPES_VALUES, True])
    assert out["values"]["pairs"] == [{"user": "b", "key": "********@/pairs/1/key"}]
    # nothing given: each field says its default, or nothing
    out = page.evaluate(READ_BACK, [SHAPES, {}, False])
    assert out["values"] == {
        "mode": "fast",
        "maybe_mode": None,
        "modes": [],
        "note": None,
        "old_style": {"user": ""},
        "pairs": [],
        "ratio": None,
        "flag": False,
    }
