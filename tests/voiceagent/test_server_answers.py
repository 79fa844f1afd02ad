"""The served product's answers to expected conditions, over daphne as ``scripts/run`` starts it.

* A body over the 1 MiB limit is 413 ``{"detail"}`` on every POST/PUT/PATCH endpoint of the OpenAPI
  schema (so a new endpoint is covered without editing this file), whether the client declares its
  length or streams it chunked, and on the admin/web-page stack too.
"""

from __future__ import annotations

import re
import signal
import subprocess

import httpx
import pytest
from servers import base_env, free_port, migrate, start, wait_http

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
    wait_http(f"{served.base}/api/v1/health", timeout=30, status=200)
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
