"""Acceptance (issue 32): the stock Genesys AudioHook reference client against our service.

Not our client: purecloudlabs/audiohook-reference-implementation at a pinned commit, its session
library (``createClientSession``) and its sample client's WebSocket factory, which signs every
request (``audiohook_reference/setup.sh`` fetches it and installs its npm dependencies under
``var/``, kept between runs). Our driver (``audiohook_reference/run.ts``) runs one session per
endpoint: open, ping, pause, resume, update (language), close; it passes when the library got
``closed`` and never had to answer with an ``error``.

- ``/contactcenter/monitor``: as the library is meant to be used (a monitor-side client); any
  binary frame from us would fail it.
- ``/contactcenter/stream``: the bot speaks (binary PCMU) and the library answers 415 to any
  binary frame, so our driver drops the bot's audio before the library sees it.

One deployment (``scripts/run``), the realtime peer for the bot. Skipped, with the reason, only
when the reference source or the npm registry cannot be reached.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
from pathlib import Path

import pytest
from deployments import RUN, Deployment, assert_log_clean, start

pytestmark = [pytest.mark.acceptance, pytest.mark.slow, pytest.mark.timeout(600)]  # a first npm ci included

HERE = Path(__file__).resolve().parent / "audiohook_reference"
CC_KEY = "cc-reference-key-0123456789"
SECRET = base64.b64encode(b"reference-client-shared-secret!!").decode()


@pytest.fixture(scope="module")
def reference() -> Path:
    """The prepared reference client (setup.sh); a skip when it cannot be fetched or installed."""
    try:
        done = subprocess.run(
            ["bash", str(HERE / "setup.sh")], capture_output=True, text=True, timeout=600, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.skip("the AudioHook reference client could not be prepared within 10 min (network)")
    if done.returncode == 3:
        pytest.skip(f"the AudioHook reference client is not reachable: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, f"setup.sh failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def service(peers, tmp_path_factory) -> Deployment:
    env = {
        "LOG_LEVEL": "INFO",
        **peers.env(),
        "CONTACTCENTER_API_KEY": CC_KEY,
        "CONTACTCENTER_CLIENT_SECRET": SECRET,
    }
    root = tmp_path_factory.mktemp("audiohook-reference")
    deployment = start(RUN, root, env, api_key=f"acc-{secrets.token_hex(16)}")
    try:
        yield deployment
    finally:
        deployment.stop()


def run_reference(reference: Path, uri: str, mode: str) -> dict:
    client = reference / "client"
    done = subprocess.run(
        ["node_modules/.bin/ts-node", "--transpile-only", "src/ours-run.ts", uri, mode, CC_KEY, SECRET],
        cwd=client,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    summary = json.loads(lines[-1]) if lines else {}
    assert done.returncode == 0, f"{mode}: {summary}\n{done.stderr[-4000:]}"
    return summary


def test_the_reference_client_completes_a_monitor_session_and_a_bot_session(reference, service):
    """One server, both endpoints, in turn."""
    monitor = run_reference(reference, f"{service.ws}/contactcenter/monitor", "monitor")
    assert monitor["steps"] == ["opened", "pong", "pong settled", "paused", "resumed", "updated", "closed"]
    assert monitor["binaryReceived"] == 0 and monitor["closed"]
    assert monitor["media"] == [
        {"type": "audio", "format": "PCMU", "channels": ["external", "internal"], "rate": 8000}
    ]
    assert monitor["supportedLanguages"] == ["en-US"]
    assert "error" not in monitor["sent"] and {"paused", "resumed", "update", "close"} <= set(monitor["sent"])
    assert monitor["received"][0] == "opened" and monitor["received"][-1] == "closed"
    assert "updated" in monitor["received"]

    bot = run_reference(reference, f"{service.ws}/contactcenter/stream", "stream")
    assert bot["steps"] == monitor["steps"] and bot["closed"]
    assert bot["binaryDropped"] > 0  # the greeting, spoken (and dropped by our harness, not the library)
    assert bot["media"] == [{"type": "audio", "format": "PCMU", "channels": ["external"], "rate": 8000}]
    assert "error" not in bot["sent"]
    assert_log_clean(service)
