"""What the hostile-input tests of the acceptance suite share: any JSON (Hypothesis), and a
bystander - another caller's browser conversation, open while the hostile input runs, that must keep
answering."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time

import websockets
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed

FUZZ_SETTINGS = settings(
    deadline=None,
    derandomize=True,  # the same messages on every run: a failure reproduces
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)

LEAF = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
ANY_JSON = st.recursive(
    LEAF, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
)


class Bystander:
    """Another caller's conversation, open on its own thread and loop while the fuzz runs: it must
    keep answering, and receive no error meant for nobody."""

    def __init__(self, url: str):
        self.url = url
        self.received: list[dict] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.ws = self._run(self._connect())
        self.reader = asyncio.run_coroutine_threadsafe(self._read(), self.loop)

    async def _connect(self):
        return await websockets.connect(self.url, max_queue=None, open_timeout=30)

    def _run(self, coro, timeout: float = 60.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _read(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for raw in self.ws:
                if isinstance(raw, str):
                    self.received.append(json.loads(raw))

    def answers(self, text: str, timeout: float = 30.0) -> bool:
        """Whether a typed ``text`` gets a final response within ``timeout``."""
        before = len(self.received)
        self._run(self.ws.send(json.dumps({"type": "text", "payload": {"text": text}})))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(m.get("type") == "response" and m["payload"].get("final") for m in self.received[before:]):
                return True
            time.sleep(0.05)
        return False

    def errors(self) -> list[dict]:
        return [m for m in self.received if m.get("type") == "error"]

    def close(self) -> None:
        if not self.thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self._run(self.ws.close(), timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
