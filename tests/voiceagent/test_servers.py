"""The real service under daphne (no lifespan events) and uvicorn (lifespan): startup, /ready, shutdown."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import httpx
import pytest
from servers import SERVER_START_S, base_env, free_port, migrate, start, wait_http

pytestmark = pytest.mark.slow
SERVERS = ["uvicorn", "daphne"]


def read_probe(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def migrated_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("srv")
    env = base_env(root)
    migrate(env)
    return root


def launch(kind, root, probe, **extra):
    port = free_port()
    env = base_env(root, LIFECYCLE_PLUGINS="lifecycle_probe", PROBE_FILE=str(probe), **extra)
    log = probe.with_suffix(".log")
    began = time.monotonic()
    proc = start(kind, port, env, log)
    return proc, f"http://127.0.0.1:{port}/api/v1", began, log


def stop(proc, timeout=20) -> float:
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return time.monotonic() - began


@pytest.mark.parametrize("kind", SERVERS)
def test_health_fast_ready_after_deferred_and_ordered_shutdown(kind, migrated_db, tmp_path):
    probe = tmp_path / "probe.jsonl"
    proc, base, _, log = launch(kind, migrated_db, probe, PROBE_WARMUP_S="4", PROBE_FAIL_CLEANUP="services")
    try:
        # /health answers while the deferred warmup (4 s) is still running: it never waits for it
        _, health = wait_http(f"{base}/health", timeout=SERVER_START_S, status=200)
        assert health.json()["status"] == "healthy"
        assert set(health.json()) == {"status", "timestamp", "message", "active_sessions", "session_metrics"}
        first_ready = wait_http(f"{base}/ready", timeout=3)[1]
        assert first_ready.status_code == 503 and first_ready.json()["warmup_completed"] is False
        _, ready = wait_http(f"{base}/ready", timeout=SERVER_START_S, status=200)
        assert ready.json()["ready"] is True and ready.json()["deferred_startup_complete"] is True
        assert ready.headers["x-content-type-options"] == "nosniff" and ready.headers["x-request-id"]
        missing = httpx.get(f"{base}/no-such-endpoint", timeout=5)
        assert missing.status_code == 404
        assert missing.json() == {"detail": "Not found: /api/v1/no-such-endpoint"}
        assert httpx.post(f"{base}/health", timeout=5).status_code == 405
        assert httpx.get(base.replace("/api/v1", "/admin/"), timeout=5).status_code == 302
    finally:
        elapsed = stop(proc)
    events = read_probe(probe)
    starts = [e["step"] for e in events if e["event"] == "start"]
    assert starts[:6] == ["core", "speech", "aoai", "services", "agents", "events"]
    assert set(starts[6:]) == {"warmup", "mcp"}
    stops = [e["step"] for e in events if e["event"] == "stop"]
    assert stops == ["events", "agents", "services", "aoai", "speech", "core"]  # services failed; others ran
    pools = {(e["event"], e["pool"]): e["t"] for e in events if e["event"].startswith("pool_stop")}
    assert pools[("pool_stop_begin", "stt")] < pools[("pool_stop_end", "tts")]  # pools shut down in parallel
    assert pools[("pool_stop_begin", "tts")] < pools[("pool_stop_end", "stt")]
    text = log.read_text()
    assert "cleanup of step 4 services component probe failed" in text
    assert "step 5 agents: ok" in text and "step 8 mcp" in text
    assert elapsed < 10


@pytest.mark.parametrize("kind", SERVERS)
def test_deferred_task_cancellation_bound(kind, migrated_db, tmp_path):
    probe = tmp_path / "probe.jsonl"
    proc, base, _, log = launch(kind, migrated_db, probe, PROBE_STUCK="1")
    try:
        wait_http(f"{base}/health", timeout=SERVER_START_S, status=200)
        assert wait_http(f"{base}/ready", timeout=5)[1].status_code == 503  # mcp never finishes
        time.sleep(0.2)
    finally:
        signalled = time.time()
        stop(proc, timeout=30)
    events = read_probe(probe)
    assert any(e["event"] == "mcp_ignored_cancel" for e in events)
    first_cleanup = min(e["t"] for e in events if e["event"] == "stop")
    waited = first_cleanup - signalled
    assert 4.0 <= waited <= 8.0, f"cleanup began {waited:.2f} s after the signal; the bound is 5 s"
    assert [e["step"] for e in events if e["event"] == "stop"][-1] == "core"
    assert "ignored cancellation" in log.read_text()
