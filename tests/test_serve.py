"""`oaken serve` on a fresh data folder: embedded servers, migrations, web + worker + beat, clean stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.loopback import free_port


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (loopback URL built here)
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.slow
def test_serve_brings_everything_up_and_stops_it_cleanly(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(OAKEN_DATA_DIR=str(tmp_path / "data"), OAKEN_PORT=str(port), OAKEN_WEB_WORKERS="1")
    oaken = Path(sys.executable).with_name("oaken")
    proc = subprocess.Popen([str(oaken), "serve"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status, body = _get(f"http://127.0.0.1:{port}/health")
                if status == 200:
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.5)
        assert status == 200, "serve did not answer /health"
        assert body == {"status": "ok"}
        # the API docs and their files come from gunicorn itself, under the strict CSP
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(base + "/api/docs", timeout=5) as docs:  # noqa: S310 (loopback)
            assert "script-src 'self'" in docs.headers["Content-Security-Policy"]
            assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in docs.read().decode()
        bundle = base + "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"
        with urllib.request.urlopen(bundle, timeout=5) as script:  # noqa: S310 (loopback)
            assert script.headers["Content-Type"].startswith("text/javascript") and b"SwaggerUIBundle" in script.read()

        children = psutil.Process(proc.pid).children(recursive=True)
        commands = [" ".join(c.cmdline()) for c in children]
        assert any("gunicorn" in c for c in commands)
        assert any("celery" in c and " worker" in c for c in commands)
        assert any("celery" in c and " beat" in c for c in commands)
        postmaster = int((tmp_path / "data" / "postgres" / "postmaster.pid").read_text().split()[0])
        redis_pid = int((tmp_path / "data" / "redis" / "redis.pid").read_text())

        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, output[-2000:]
    assert f"http://127.0.0.1:{port}/" in output
    time.sleep(0.5)
    for pid in [c.pid for c in children] + [postmaster, redis_pid]:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
