"""The production shape: docker-compose.yml validates, and every service is configured by environment only."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def _compose() -> list[str]:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.skip("no docker compose client here (bin/system-packages installs one)")


def test_compose_file_validates_and_has_the_production_services(tmp_path: Path) -> None:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(
        [*_compose(), "-f", str(ROOT / "docker-compose.yml"), "config"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    config = yaml.safe_load(result.stdout)
    services = config["services"]
    assert set(services) == {"postgres", "redis", "web", "worker", "beat", "watcher"}
    assert services["postgres"]["image"].startswith("pgvector/pgvector:")
    for name in ("web", "worker", "beat", "watcher"):
        environment = services[name]["environment"]
        assert environment["DATABASE_URL"].startswith("postgresql://")
        assert environment["REDIS_URL"].startswith("redis://")
    assert "worker" in services["worker"]["command"]
    assert "beat" in services["beat"]["command"]
    assert services["watcher"]["command"] == ["oaken", "watch-mail"]


def test_every_role_is_told_where_people_reach_oaken() -> None:
    # the worker and beat answer no request, so their links (invitations) start with OAKEN_PUBLIC_URL
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for name in ("web", "worker", "beat"):
        assert services[name]["environment"]["OAKEN_PUBLIC_URL"] == "${OAKEN_PUBLIC_URL:-}", name


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in ci
    first_block = readme.split("```")[1]
    assert "make serve" in first_block and "make test" in first_block


def test_the_image_and_compose_file_give_plugins_their_sandbox() -> None:
    # bubblewrap needs user namespaces in a container (docs/plugins.md); without them no plugin would load
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "bubblewrap" in dockerfile and "libseccomp2" in dockerfile
    assert "OAKEN_PLUGIN_ENV=/app/.plugins" in dockerfile and "python -m venv /app/.plugins" in dockerfile
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for name in ("web", "worker"):
        assert "seccomp=unconfined" in services[name]["security_opt"], name
