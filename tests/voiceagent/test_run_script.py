"""The README's first command: scripts/run installs what is missing and serves on embedded defaults."""

import os
import signal
import subprocess
import time

import httpx
import pytest
from servers import ROOT, free_port

pytestmark = pytest.mark.slow


def test_scripts_run_starts_the_service(tmp_path):
    port = free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'run.sqlite3'}",
        "STT_POOL_SIZE": "1",
        "TTS_POOL_SIZE": "1",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    proc = subprocess.Popen(
        ["bash", "scripts/run"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240  # a first run may install packages
        body = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=2)
                if response.status_code == 200:
                    body = response.json()
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        assert body is not None, (proc.poll(), proc.stdout.read().decode() if proc.poll() is not None else "")
        assert body["status"] == "healthy"
        page = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
        assert page.status_code == 200 and "Start microphone" in page.text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
