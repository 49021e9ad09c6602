"""Settings checked at start-up: an operation naming a bound that is not a setting, a role that is not a role, or a
bound outside its range fails `manage.py check` (and so CI and `oaken serve`), not the first call that meets it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import Error
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from pydantic import BaseModel, ConfigDict
from pytest_django import Settings

from apps.core.bounds import bounds
from apps.operations.checks import check_operations
from apps.operations.registry import Bound, Ceiling, OpClass, above, operation, registry
from tests.loopback import free_port


class Items(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ids: list[str] = []


class Done(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ok: bool = True


@pytest.fixture
def throwaway() -> Iterator[Any]:
    """Define operations in the real registry for one test, and forget them after it."""
    names: list[str] = []

    def define(name: str, **spec: Any) -> None:
        common: dict[str, Any] = {
            "summary": "t",
            "input": Items,
            "output": Done,
            "op_class": OpClass.READ,
            "ceiling": Ceiling.NEVER,
        }
        operation(name=name, **(common | spec))(lambda ctx, data: Done())
        names.append(name)

    yield define
    for name in names:
        registry.remove(name)


def _ids(found: list[Any]) -> list[tuple[str, Any]]:
    return [(message.id, message.obj) for message in found]


def test_the_real_registry_and_settings_pass() -> None:
    assert check_operations() == []
    call_command("check", fail_level="WARNING")  # raises SystemCheckError on any finding


def test_a_bound_naming_no_setting_is_an_error(throwaway: Any) -> None:
    throwaway("test_typo_bound", bounds=(Bound("ids", "BATCH_MAXX"),))
    found = check_operations()
    assert _ids(found) == [("oaken.E001", "test_typo_bound")]
    assert isinstance(found[0], Error) and "'BATCH_MAXX'" in found[0].msg
    with pytest.raises(SystemCheckError, match=r"oaken\.E001"):
        call_command("check")


def test_a_threshold_naming_no_setting_is_an_error(throwaway: Any) -> None:
    throwaway("test_typo_threshold", op_class=OpClass.MUTATE, confirm=above("CONFIRM_FREE_MAXX", lambda d: 1))
    assert _ids(check_operations()) == [("oaken.E002", "test_typo_threshold")]


def test_a_role_that_is_not_a_role_is_an_error(throwaway: Any) -> None:
    throwaway("test_bad_role", role="ADMINISTRATOR")
    throwaway("test_lower_case_role", role="admin")
    assert _ids(check_operations()) == [("oaken.E003", "test_bad_role"), ("oaken.E003", "test_lower_case_role")]


def test_bounds_outside_their_range_are_errors(settings: Settings) -> None:
    ranges = dict(settings.OPERATIONS_RANGES)
    # a default past its declared maximum (a typo in config/settings/operations.py), and a value set below its minimum
    ranges["IMPORT_BATCH_SIZE"] = (6000, 1, 5000)
    settings.OPERATIONS_RANGES = ranges
    settings.OPERATIONS = {**settings.OPERATIONS, "INVITATION_TTL_DAYS": 0}
    assert _ids(check_operations()) == [("oaken.E004", "IMPORT_BATCH_SIZE"), ("oaken.E004", "INVITATION_TTL_DAYS")]


def test_a_bound_without_its_range_and_a_default_over_its_maximum_are_errors(settings: Settings) -> None:
    settings.OPERATIONS = {**settings.OPERATIONS, "NEW_THING_MAX": 3, "PAGE_SIZE_DEFAULT": 500}
    assert _ids(check_operations()) == [
        ("oaken.E005", "NEW_THING_MAX"),
        ("oaken.E006", "PAGE_SIZE_DEFAULT"),
        ("oaken.E008", "NEW_THING_MAX"),  # and code could not read it: the typed bounds do not declare it
    ]


def test_a_bound_the_typed_bounds_declare_but_the_settings_lack_is_an_error(settings: Settings) -> None:
    settings.OPERATIONS = {k: v for k, v in settings.OPERATIONS.items() if k != "SIGN_IN_SLOW_SECONDS"}
    assert ("oaken.E008", "SIGN_IN_SLOW_SECONDS") in _ids(check_operations())


def test_the_typed_bounds_read_the_settings_at_each_use_and_know_no_other_name(settings: Settings) -> None:
    assert settings.OPERATIONS["PAGE_SIZE_MAX"] == bounds.PAGE_SIZE_MAX
    settings.OPERATIONS = {**settings.OPERATIONS, "PAGE_SIZE_MAX": 7, "NEW_THING_MAX": 3}
    assert (bounds.PAGE_SIZE_MAX, bounds["PAGE_SIZE_MAX"]) == (7, 7)
    undeclared = "NEW_THING_MAX"  # in the settings, but no code may read a bound the typed bounds do not declare
    with pytest.raises(AttributeError):
        getattr(bounds, undeclared)
    with pytest.raises(KeyError):
        _ = bounds[undeclared]


@pytest.mark.slow
def test_oaken_serve_does_not_start_with_a_bound_over_its_maximum(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(OAKEN_DATA_DIR=str(tmp_path / "data"), OAKEN_PORT=str(free_port()), OAKEN_PAGE_SIZE_DEFAULT="300")
    oaken = Path(sys.executable).with_name("oaken")
    proc = subprocess.Popen([str(oaken), "serve"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        # it started after all: stop it as a person would (its children stop in order), then fail
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
        pytest.fail("oaken serve started with PAGE_SIZE_DEFAULT over PAGE_SIZE_MAX")
    assert proc.returncode != 0
    assert "oaken.E006" in output
    assert "Oaken is serving" not in output
