"""Acceptance: what an outside attacker tried against the README's production configuration
(issue 31), on both deployments run with ``ENVIRONMENT=production``: a prompt template that would
freeze a worker, voice names that import modules or name files, a staff cookie ridden from another
origin, a foreign Host header, and anonymous probes asking for details. Each is refused as
documented, the other callers never notice, and the log holds WARNING lines, never an ERROR."""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import threading

import httpx
import pytest
import websockets
from deployments import Deployment, assert_log_clean, clean_environ
from servers import PYTHON, ROOT
from websockets.exceptions import ConnectionClosed

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

SECRET_KEY = "acc-" + secrets.token_urlsafe(48)
SERVER_ENV = {
    "ENVIRONMENT": "production",
    "SECRET_KEY": SECRET_KEY,
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "SECURE_SSL_REDIRECT": "false",  # the suite speaks plain HTTP; TLS ends at a proxy in the README
}
NESTED_RANGE = "{% for a in range(20000) %}{% for b in range(20000) %}{% endfor %}{% endfor %}x"
STRING_BOMB = "{{ 'x' * 10**9 }}"
ZEN = "Beautiful is better than ugly"  # what importing `this` prints


def staff_cookie(deployment: Deployment) -> str:
    """A staff user's session in the deployment's database, as the admin's login would make it."""
    code = (
        "from django.contrib.auth import get_user_model\n"
        "from django.contrib.sessions.backends.db import SessionStore\n"
        "u = get_user_model().objects.create_user(f'ops{__import__(\"secrets\").token_hex(4)}', "
        "password='pw-123456-xyz', is_staff=True)\n"
        "s = SessionStore()\n"
        "s['_auth_user_id'] = str(u.pk)\n"
        "s['_auth_user_backend'] = 'django.contrib.auth.backends.ModelBackend'\n"
        "s['_auth_user_hash'] = u.get_session_auth_hash()\n"
        "s.create()\n"
        "print(s.session_key)\n"
    )
    env = {
        **clean_environ(),
        **SERVER_ENV,
        "API_KEYS": deployment.api_key,
        "DATABASE_URL": deployment.database_url,
        "LOG_LEVEL": "WARNING",
    }
    done = subprocess.run(
        [PYTHON, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return f"sessionid={done.stdout.strip().splitlines()[-1]}"


async def opened_or_closed(url: str, **kwargs) -> tuple[str, int | None, str]:
    """("opened", None, first event name) or ("closed", code, reason)."""
    try:
        async with websockets.connect(url, max_queue=None, open_timeout=30, **kwargs) as ws:
            while True:
                message = json.loads(await asyncio.wait_for(ws.recv(), 15))
                if message.get("type") == "event":
                    return "opened", None, message["payload"].get("name", "")
    except ConnectionClosed as exc:
        return "closed", exc.rcvd.code if exc.rcvd else None, exc.rcvd.reason if exc.rcvd else ""


def test_a_template_that_would_freeze_a_worker_is_refused_and_health_keeps_answering(deployment):
    """Point 1: the nested range(20000) and the string bomb are refused when saved (400 naming the
    budget) while /api/v1/health, polled all along, keeps answering."""
    answers: list[int] = []
    stop = threading.Event()

    def poll_health() -> None:
        with httpx.Client(timeout=10) as client:
            while not stop.is_set():
                answers.append(client.get(f"{deployment.http}/health").status_code)

    poller = threading.Thread(target=poll_health)
    poller.start()
    try:
        for index, prompt in enumerate((NESTED_RANGE, STRING_BOMB)):
            body = {"session_id": f"bomb-{index}", "name": "bomber", "prompt": prompt}
            response = httpx.post(f"{deployment.http}/agents", json=body, headers=deployment.auth, timeout=30)
            assert response.status_code == 400, response.text
            assert "budget" in response.json()["errors"]["prompt"][0], response.json()
    finally:
        stop.set()
        poller.join(30)
    assert answers and set(answers) == {200}


async def test_a_voice_is_a_name_from_the_allow_list(deployment):
    """Point 2: a voice naming a module or a file is refused where it is given (REST 400, socket
    bad_config), nothing is imported, the socket goes on, no exception text reaches the client."""
    for voice in ("/etc/passwd", "this.x"):
        response = httpx.put(
            f"{deployment.http}/agents/concierge", json={"voice": voice}, headers=deployment.auth, timeout=30
        )
        assert response.status_code == 400 and "voice" in response.json()["errors"], response.text
    url = f"{deployment.ws}/browser/conversation?api_key={deployment.api_key}"
    async with websockets.connect(url, max_queue=None, open_timeout=30) as ws:
        seen: list[dict] = []

        async def until(predicate) -> dict:
            async with asyncio.timeout(60):
                while True:
                    message = json.loads(await ws.recv())
                    seen.append(message)
                    if predicate(message):
                        return message

        await until(lambda m: m["type"] == "event")
        await ws.send(json.dumps({"type": "config", "payload": {"overrides": {"voice": "this.x"}}}))
        error = await until(lambda m: m["type"] == "error")
        assert error["payload"]["code"] == "bad_config" and "not a known voice" in error["payload"]["message"]
        await ws.send(json.dumps({"type": "text", "payload": {"text": "hello"}}))
        await until(lambda m: m["type"] == "response" and m["payload"].get("final"))
    text = json.dumps(seen)
    assert "ModuleNotFoundError" not in text and "Traceback" not in text
    assert ZEN not in deployment.log_text()


async def test_a_staff_cookie_from_another_origin_is_refused(deployment):
    """Point 3: the dashboard relay and the browser socket, opened with a staff session cookie,
    refuse a foreign origin and ``Origin: null`` with 1008; the service's own page and API-key
    clients (whatever their origin) are let in."""
    cookie = await asyncio.to_thread(staff_cookie, deployment)
    own = f"http://127.0.0.1:{deployment.port}"
    for path in ("/browser/dashboard/relay", "/browser/conversation"):
        url = f"{deployment.ws}{path}"
        for origin in ("https://evil.example", "null"):
            outcome = await opened_or_closed(url, origin=origin, additional_headers={"Cookie": cookie})
            assert outcome[:2] == ("closed", 1008) and "forbidden origin" in outcome[2], (
                path,
                origin,
                outcome,
            )
        outcome = await opened_or_closed(url, origin=own, additional_headers={"Cookie": cookie})
        assert outcome[0] == "opened", (path, outcome)
        keyed = await opened_or_closed(f"{url}?api_key={deployment.api_key}", origin="https://evil.example")
        assert keyed[0] == "opened", (path, keyed)


def test_a_foreign_host_is_a_400_and_one_warning(deployment):
    """Point 5: the API answered any Host; a bad Host on a page logged an ERROR with a traceback."""
    before = len(deployment.log_text())
    for path in ("/api/v1/agents", "/api/v1/scenarios", "/", "/dashboard", "/admin/"):
        response = httpx.get(
            f"http://127.0.0.1:{deployment.port}{path}",
            headers={"Host": "evil.example", **deployment.auth},
            timeout=10,
        )
        assert response.status_code == 400 and response.json()["detail"], (path, response.text)
    log = deployment.log_text()[before:]
    assert log.count("Host 'evil.example' is not in ALLOWED_HOSTS") == 5, log[-3000:]
    assert "DisallowedHost" not in log and "Traceback" not in log


def test_anonymous_probes_get_the_status_only(deployment):
    """Point 6: anonymous /ready and /readiness named the Redis host and port and the providers."""
    for path in ("ready", "readiness"):
        anonymous = httpx.get(f"{deployment.http}/{path}", timeout=10)
        assert set(anonymous.json()) <= {"ready", "status", "timestamp"}, anonymous.json()
        keyed = httpx.get(f"{deployment.http}/{path}", headers=deployment.auth, timeout=10)
        assert keyed.status_code == anonymous.status_code and len(keyed.json()) > len(anonymous.json())


def test_server_log_is_clean(deployment):
    """Every refusal above is a WARNING at most; nothing here may be an ERROR or a traceback."""
    assert_log_clean(deployment)
