"""Fixtures of the fault suite: the service as users run it (``scripts/run``, from the acceptance
suite's deployments.py), its chat model, realtime voice API and MCP server being the local
wire-level peers reached THROUGH fault proxies (tests/support/fault_proxy.py), so each case can
slow, fail, hang or cut one of them while real WebSocket clients talk to the service.

One deployment serves every module that asks for :func:`service` (started by the first, stopped at
the end of the run); :func:`faults` hands a test the peers and proxies and puts all of them back to
healthy before and after it. Nothing here is autouse: a module that needs none of this (the Redis
outage module, the proxy's own tests) starts nothing.
"""

from __future__ import annotations

import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ACCEPTANCE = Path(__file__).resolve().parents[1] / "acceptance"
if str(ACCEPTANCE) not in sys.path:  # deployments.py, clients.py: reused, not copied
    sys.path.insert(0, str(ACCEPTANCE))

from deployments import RUN, Deployment, start, unexpected  # noqa: E402
from fault_proxy import FaultProxy  # noqa: E402
from fault_wires import MCP_SERVER, REALTIME_KEY, Faults  # noqa: E402
from mcp_peers import PeerServer, build_server  # noqa: E402
from openai_peer import OpenAIPeer  # noqa: E402
from realtime_peer import RealtimePeer  # noqa: E402
from servers import ROOT  # noqa: E402


@pytest.fixture(scope="session")
def wires() -> Iterator[Faults]:
    """The peers and their proxies, started once per run."""
    calls: list = []
    chat = OpenAIPeer().start()
    realtime = RealtimePeer(api_key=REALTIME_KEY).start()
    mcp = PeerServer(lambda: build_server(MCP_SERVER, calls=calls)).start()
    started = Faults(
        chat=chat,
        chat_proxy=FaultProxy(chat.port).start(),
        realtime=realtime,
        realtime_proxy=FaultProxy(realtime.port).start(),
        mcp=mcp,
        mcp_proxy=FaultProxy(mcp.port).start(),
        mcp_calls=calls,
    )
    started.heal()
    try:
        yield started
    finally:
        for proxy in started.proxies:
            proxy.stop()
        mcp.stop()
        realtime.stop()
        chat.stop()


@pytest.fixture(scope="session")
def service(wires: Faults, tmp_path_factory) -> Iterator[Deployment]:
    """``scripts/run`` (daphne, SQLite, in-memory channel layer) with its providers behind the proxies."""
    env = {
        "LOG_LEVEL": "INFO",
        "STT_POOL_SIZE": "1",  # callers type here: one warm decoder and synthesiser are plenty
        "TTS_POOL_SIZE": "1",
        "PYTHONPATH": str(ROOT),
        **wires.env(),
    }
    root = tmp_path_factory.mktemp("faults-run")
    deployment = start(RUN, root, env, api_key=f"faults-{secrets.token_hex(16)}")
    try:
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture
def faults(wires: Faults) -> Iterator[Faults]:
    """The wires, healthy before the test and put back to healthy after it, whatever it broke."""
    wires.heal()
    try:
        yield wires
    finally:
        wires.heal()


@pytest.fixture
def clean_log(service: Deployment) -> Iterator[None]:
    """The test's part of the service log holds no ERROR line and no traceback: a fault the service
    handles is a WARNING, not an incident (``pytestmark = pytest.mark.usefixtures("clean_log")``)."""
    start_at = len(service.log_text())
    yield
    time.sleep(0.5)  # the last lines of the test's requests
    found = unexpected(service.log_text()[start_at:], {})
    assert not found, "the service logged errors:\n" + "\n".join(found[:20])
