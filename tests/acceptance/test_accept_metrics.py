"""Acceptance: ``/metrics`` under ``uvicorn --workers 2`` counts the conversations of both workers.

Browser callers type to the banking agents until both workers have served some (each worker writes
its figures to its own files in the deployment's metric directory, chosen by the service: under
``$TMPDIR/voiceagent-metrics/<supervisor pid>-...``); then every scrape, whichever worker answers
it, shows the sum: as many conversations as were held, at least one turn each."""

from __future__ import annotations

import asyncio
import json
import secrets
import time

import httpx
import pytest
import websockets
from deployments import UVICORN, Deployment, assert_log_clean, start
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.acceptance, pytest.mark.slow, pytest.mark.redis]
BATCH = 4  # conversations at once: the kernel spreads their connections over the workers
MAX_BATCHES = 6


@pytest.fixture(scope="module")
def uvicorn2(peers, tmp_path_factory):
    root = tmp_path_factory.mktemp("acceptance-metrics")
    env = {"LOG_LEVEL": "INFO", **peers.env(), "TMPDIR": str(root)}
    deployment = start(UVICORN, root, env, api_key=f"acc-{secrets.token_hex(16)}")
    try:
        yield deployment, root
    finally:
        deployment.stop()


async def converse(deployment: Deployment) -> None:
    """One caller: the conversation socket, the banking scenario, a typed question, the answer
    heard out (a turn is counted once its audio has played, or as far as it was heard)."""
    url = f"{deployment.ws}/browser/conversation?api_key={deployment.api_key}"
    playing_until = 0.0
    async with websockets.connect(url, max_size=2**22, open_timeout=30) as ws:

        async def until(predicate) -> None:
            nonlocal playing_until
            async with asyncio.timeout(60):
                while True:
                    message = json.loads(await ws.recv())
                    if message["type"] == "audio":
                        seconds = len(message["payload"]["data"]) * 3 / 8 / message["payload"]["sample_rate"]
                        playing_until = max(playing_until, time.monotonic()) + seconds
                    if predicate(message):
                        return

        await until(lambda m: m["type"] == "event" and m["payload"].get("name") == "session_started")
        await ws.send(json.dumps({"type": "config", "payload": {"scenario": "banking"}}))
        await ws.send(json.dumps({"type": "text", "payload": {"text": "i lost my card"}}))
        await until(lambda m: m["type"] == "transcript" and m["payload"]["final"])
        await until(lambda m: m["type"] == "event" and m["payload"].get("state") == "thinking")  # greeted
        await until(lambda m: m["type"] == "response" and m["payload"]["final"])
        await until(lambda m: m["type"] == "event" and m["payload"].get("state") == "listening")
        await asyncio.sleep(max(0.0, playing_until - time.monotonic()) + 0.3)


def counting_workers(root, supervisor_pid: int) -> set[str]:
    """The workers that have counted something: one ``counter_<pid>.db`` each."""
    files = root.glob(f"voiceagent-metrics/{supervisor_pid}-*/counter_*.db")
    return {path.stem.rsplit("_", 1)[1] for path in files}


def scrape(deployment: Deployment) -> dict[tuple[str, tuple], float]:
    response = httpx.get(f"http://127.0.0.1:{deployment.port}/metrics", headers=deployment.auth, timeout=10)
    assert response.status_code == 200, response.text[:300]
    families = text_string_to_metric_families(response.text)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_counts_of_both_workers_add_up(uvicorn2):
    deployment, root = uvicorn2
    held = 0
    for _ in range(MAX_BATCHES):

        async def batch() -> None:
            await asyncio.gather(*(converse(deployment) for _ in range(BATCH)))

        asyncio.run(batch())
        held += BATCH
        if len(counting_workers(root, deployment.proc.pid)) == deployment.workers:
            break
    assert len(counting_workers(root, deployment.proc.pid)) == 2, "one worker served every conversation"
    conversations = ("voiceagent_conversations_total", (("mode", "cascade"), ("transport", "browser")))
    turns = ("voiceagent_turns_total", (("transport", "browser"),))
    active = ("voiceagent_active_conversations", (("transport", "browser"),))
    for _ in range(100):  # the conversations close (and their last turns commit) after the sockets
        figures = scrape(deployment)
        if figures.get(turns, 0) >= held and figures.get(active, 0) == 0:
            break
        time.sleep(0.1)
    for _ in range(4 * deployment.workers):  # a fresh connection each: both workers answer some
        figures = scrape(deployment)
        assert figures[conversations] == held
        assert figures[turns] >= held
        assert figures.get(active, 0) == 0
    assert_log_clean(deployment)
