"""Production refuses what it cannot serve safely, with one clear line, and no more than that.

- Telephony configured without ``TELEPHONY_MEDIA_AUDIENCE``: a configuration error (anyone could
  open the media stream); without telephony, the production media stream needs the API key.
- No API key anywhere (``API_KEYS`` empty and none stored): the server refuses to start, and a
  uvicorn ``--workers`` supervisor stops instead of restarting the workers forever. Keys stored with
  ``manage.py create_api_key`` count; a database that cannot be read does not refuse.
- ``/api/v1/schema/`` and ``/api/v1/docs/`` need the key like the API, unless ``API_DOCS_PUBLIC``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import websockets
from django.test import override_settings
from servers import PYTHON, ROOT, base_env, free_port, migrate, server_command, start, wait_http
from websockets.exceptions import ConnectionClosed

from voiceagent.config import ConfigError, load_config
from voiceagent.preflight import NO_API_KEY

STRONG = "k" * 30 + "abcdefghijklmnopqrstuvwxyz0123"
PROD = {"ENVIRONMENT": "production", "SECRET_KEY": STRONG, "ALLOWED_HOSTS": "127.0.0.1,testserver"}
PROXY = {"X-Forwarded-Proto": "https"}  # a TLS-terminating proxy in front, as the README says
MEDIA_REASON = "unauthorized: send an API key (?api_key=) or set TELEPHONY_MEDIA_AUDIENCE"


# --- telephony without an audience ----------------------------------------------------------------


def test_production_telephony_needs_a_media_audience():
    telephony = {"TELEPHONY_ENDPOINT": "https://acs.example.com", "BASE_URL": "https://voice.example.com"}
    with pytest.raises(ConfigError) as info:
        load_config({**PROD, **telephony})
    assert str(info.value).startswith("TELEPHONY_MEDIA_AUDIENCE is required when ENVIRONMENT=production")
    assert load_config({**PROD, **telephony, "TELEPHONY_MEDIA_AUDIENCE": "acs-resource-id"}).production
    assert not load_config(telephony).production  # development: the simulator stays anonymous
    assert load_config(PROD).production  # production without telephony: nothing to refuse


def test_the_refusal_is_one_line_at_startup(tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "voiceagent.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        **PROD,
        "TELEPHONY_ENDPOINT": "https://acs.example.com",
    }
    proc = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "configuration error: TELEPHONY_MEDIA_AUDIENCE is required when ENVIRONMENT=production and "
        "TELEPHONY_ENDPOINT is set: set the ACS resource id, or anyone can open the media stream"
    ]


# --- the API docs ------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/v1/schema/", "/api/v1/docs/"])
def test_api_docs_need_the_key_in_production_unless_public(api_client, path):
    key = "prod-docs-key-123456"
    with override_settings(CONFIG=load_config({**PROD, "API_KEYS": key}), PRODUCTION=True):
        refused = api_client.get(path, secure=True)
        assert refused.status_code == 401 and set(refused.json()) == {"detail"}
        assert api_client.get(path, secure=True, HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 200
        assert api_client.get(path, secure=True, HTTP_X_API_KEY="wrong-key").status_code == 401
    public = load_config({**PROD, "API_KEYS": key, "API_DOCS_PUBLIC": "true"})
    with override_settings(CONFIG=public, PRODUCTION=True):
        assert api_client.get(path, secure=True).status_code == 200
        assert api_client.get(path, secure=True, HTTP_AUTHORIZATION="Bearer stale").status_code == 200
    with override_settings(CONFIG=load_config({}), PRODUCTION=False):  # development without keys: open
        assert api_client.get(path).status_code == 200


# --- servers: refusing to start, and not refusing wrongly ---------------------------------------------


def run_to_exit(cmd: list[str], env: dict[str, str], timeout: float = 60) -> tuple[int | None, str]:
    """Run a server that should refuse to start: (exit status, output); None if it kept running."""
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this test started: the server and its workers
        out, _ = proc.communicate(timeout=10)
        return None, out.decode(errors="replace")


def production_env(root: Path, **extra: str) -> dict[str, str]:
    env = base_env(root, **PROD, **extra)
    env.pop("API_KEYS", None)
    return env


def config_errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if "configuration error" in line]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "workers"), [("daphne", 1), ("uvicorn", 1), ("uvicorn", 2)])
def test_production_without_any_api_key_refuses_to_start(tmp_path, kind, workers):
    env = production_env(tmp_path)
    migrate(env)  # the key table exists and is empty: there really is no key
    status, output = run_to_exit(server_command(kind, free_port(), workers), env)
    assert status is not None, f"{kind} x{workers} kept running (restarting its workers?):\n{output[-3000:]}"
    if workers == 1:
        assert status == 3, output[-3000:]
    errors = config_errors(output)
    assert errors and set(errors) == {f"configuration error: {NO_API_KEY}"}, output[-3000:]
    assert len(errors) == workers, output[-3000:]  # once per process, not in a restart loop
    assert "Traceback" not in output, output[-3000:]


@pytest.mark.slow
def test_uvicorn_workers_stop_on_a_settings_error_instead_of_restarting(tmp_path):
    env = production_env(tmp_path, API_KEYS="some-key-123456")
    env.pop("SECRET_KEY")
    status, output = run_to_exit(server_command("uvicorn", free_port(), workers=2), env)
    assert status is not None, f"uvicorn kept restarting its workers:\n{output[-3000:]}"
    assert len(config_errors(output)) == 2, output[-3000:]
    assert "SECRET_KEY is required" in config_errors(output)[0]


async def media_stream_refused(ws_url: str) -> tuple[int, str] | None:
    """The close (code, reason) of a simulator media stream, or None when it was admitted."""
    async with websockets.connect(ws_url) as ws:
        try:
            first = json.loads(await ws.recv())
        except ConnectionClosed as exc:
            return exc.rcvd.code, exc.rcvd.reason
        assert first["payload"]["name"] == "session_started", first
        return None


@pytest.mark.slow
async def test_a_stored_key_is_enough_and_the_media_stream_needs_it(tmp_path):
    env = production_env(tmp_path)
    migrate(env)
    made = subprocess.run(
        [PYTHON, "manage.py", "create_api_key", "ops"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    key = made.stdout.strip().splitlines()[-1]
    port = free_port()
    proc = start("daphne", port, env, tmp_path / "server.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v1/health", timeout=60, status=200)
        base = f"http://127.0.0.1:{port}/api/v1"
        async with httpx.AsyncClient(headers=PROXY, timeout=30) as http:
            assert (await http.get(f"{base}/pools")).status_code == 401
            assert (
                await http.get(f"{base}/pools", headers={"Authorization": f"Bearer {key}"})
            ).status_code == 200
            assert (await http.get(f"{base}/schema/")).status_code == 401
            assert (await http.get(f"{base}/schema/", headers={"X-API-Key": key})).status_code == 200
        stream = f"ws://127.0.0.1:{port}/api/v1/media/stream?scenario=default&events=1"
        assert await media_stream_refused(stream) == (1008, MEDIA_REASON)
        assert await media_stream_refused(stream + "&api_key=wrong-key-0000") == (1008, MEDIA_REASON)
        assert await media_stream_refused(f"{stream}&api_key={key}") is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    log = (tmp_path / "server.log").read_text(errors="replace")
    assert not config_errors(log) and key not in log


@pytest.mark.slow
def test_a_database_that_cannot_be_read_does_not_refuse(tmp_path):
    """No tables yet (migrate not run): the keys cannot be seen, so the server starts, fail-closed."""
    env = production_env(tmp_path)
    port = free_port()
    proc = start("uvicorn", port, env, tmp_path / "server.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v1/health", timeout=60, status=200)
        assert httpx.get(f"http://127.0.0.1:{port}/api/v1/pools", headers=PROXY).status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    log = (tmp_path / "server.log").read_text(errors="replace")
    assert not config_errors(log)
    assert "cannot read the stored API keys" in log
