"""The served product's answers to expected conditions, over daphne as ``scripts/run`` starts it.

* A body over the 1 MiB limit is 413 ``{"detail"}`` on every POST/PUT/PATCH endpoint of the OpenAPI
  schema (so a new endpoint is covered without editing this file), whether the client declares its
  length or streams it chunked, and on the admin/web-page stack too.
* ``/ready`` answers 503 while the deferred startup steps run: an expected answer, logged below
  ERROR; the server log of the whole run has no ERROR line and no traceback. ``/readiness`` with an
  unhealthy component: a WARNING naming it, no ERROR.
"""

from __future__ import annotations

import re
import signal
import subprocess

import httpx
import pytest
from servers import SERVER_START_S, base_env, free_port, migrate, start, wait_http

FIVE_MB = 5 * 1024 * 1024
WRITE_METHODS = ("post", "put", "patch")


class Served:
    def __init__(self, proc: subprocess.Popen, base: str, log):
        self.proc, self.base, self.log = proc, base, log

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("answers")
    env = base_env(
        root, LIFECYCLE_PLUGINS="lifecycle_probe", PROBE_FILE=str(root / "probe.jsonl"), PROBE_WARMUP_S="4"
    )
    migrate(env)
    port = free_port()
    proc = start("daphne", port, env, root / "server.log")
    server = Served(proc, f"http://127.0.0.1:{port}", root / "server.log")
    try:
        yield server
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.slow
def test_ready_503_during_startup_is_logged_below_error(served):
    """Runs first: the deferred warmup (4 s) is still going when /health first answers."""
    wait_http(f"{served.base}/api/v1/health", timeout=SERVER_START_S, status=200)
    first = httpx.get(f"{served.base}/api/v1/ready", timeout=5)
    assert first.status_code == 503, "the deferred warmup should still be running"
    wait_http(f"{served.base}/api/v1/ready", timeout=SERVER_START_S, status=200)
    text = served.log_text()
    assert not re.search(r"\bERROR\b|Traceback|Service Unavailable", text), text
    assert re.search(r"INFO +voiceagent.health: GET /api/v1/ready: 503, not ready yet", text), text


def write_operations(base: str) -> list[tuple[str, str]]:
    schema = httpx.get(f"{base}/api/v1/schema/?format=json", timeout=30).json()
    found = []
    for path, operations in schema["paths"].items():
        for method in operations:
            if method in WRITE_METHODS:
                found.append((method.upper(), re.sub(r"\{[^}]+\}", "x", path)))
    return found


def chunks(total: int, size: int = 256 * 1024):
    piece = b"x" * size
    for _ in range(total // size):
        yield piece


@pytest.mark.slow
def test_every_write_endpoint_answers_an_oversized_body_with_413(served):
    wait_http(f"{served.base}/api/v1/health", timeout=SERVER_START_S, status=200)
    operations = write_operations(served.base)
    assert {("POST", "/api/v1/calls/initiate"), ("POST", "/api/v1/calls/answer")} <= set(operations)
    assert len(operations) >= 10
    body = b'{"padding": "' + b"x" * FIVE_MB + b'"}'
    headers = {"content-type": "application/json"}
    wrong = []
    with httpx.Client(base_url=served.base, timeout=60) as client:
        for method, path in [*operations, ("POST", "/admin/login/")]:
            for how, content in (("declared", body), ("chunked", chunks(FIVE_MB))):
                response = client.request(method, path, content=content, headers=headers)
                detail = response.json().get("detail", "") if response.status_code == 413 else ""
                if response.status_code != 413 or "too large" not in detail:
                    wrong.append((method, path, how, response.status_code, response.text[:120]))
    assert not wrong, wrong
    # a body within the limit still reaches the view
    small = httpx.post(f"{served.base}/api/v1/calls/initiate", json={"phone_number": "1"}, timeout=10)
    assert small.status_code == 400 and "phone_number" in small.json()["detail"]
    assert not re.search(r"\bERROR\b|Traceback", served.log_text())


@pytest.fixture
def failing_cache_check():
    from voiceagent.health import checks

    saved = checks.registered()
    checks.register_check("cache", lambda: ("unhealthy", "redis refused the connection"))
    yield
    checks._checks.clear()
    checks._checks.update(saved)


def test_readiness_503_is_a_warning_naming_the_component(api_client, failing_cache_check, caplog):
    with caplog.at_level("DEBUG"):
        response = api_client.get("/api/v1/readiness")
    assert response.status_code == 503
    assert not [r for r in caplog.records if r.levelno >= 40], [r.getMessage() for r in caplog.records]
    said = [r for r in caplog.records if r.name == "voiceagent.health"]
    assert [(r.levelname, r.getMessage()) for r in said] == [
        ("WARNING", "GET /api/v1/readiness: 503, unhealthy: cache")
    ]
