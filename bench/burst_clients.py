"""Clients of bench_connection_burst.py: a burst of phone media streams and a bystander conversation.

The burst: ``n`` media streams (``/api/v1/media/stream?events=1``, the provider's wire format) all
opened at once from their own process(es), so that the load generator's own work does not delay
the bystander's. Each sends ``AudioMetadata`` (and, with ``audio``, 20 ms silent frames in real
time, as the provider streams silence), reads everything, and reports how it was answered: accepted
(``session_started`` event) or refused (close code and reason), with ``time.monotonic`` instants.

The bystander: one browser conversation (``/api/v1/browser/conversation``) typing a turn every
``interval`` seconds and timing, from its send, the echo of its own words (``transcript``: only the
transport and the event loop in the path), the agent's first ``response`` text (the engine's turn:
agent resolution, the session store, the chat provider) and the first ``audio`` (plus TTS).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import multiprocessing
import time
from dataclasses import dataclass, field

import websockets

RATE, FRAME_MS = 16000, 20
SILENCE = base64.b64encode(bytes(RATE * FRAME_MS // 1000 * 2)).decode()
METADATA = json.dumps(
    {
        "kind": "AudioMetadata",
        "audioMetadata": {"subscriptionId": "bench", "encoding": "PCM", "sampleRate": RATE, "channels": 1},
    }
)
FRAME = json.dumps({"kind": "AudioData", "audioData": {"data": SILENCE, "silent": True}})


@dataclass
class Stream:
    """How the server should see one stream of the burst: URL and handshake headers."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)


async def _one_stream(stream: Stream, start_at: float, hold_s: float, audio: bool) -> dict:
    """Open at ``start_at`` (monotonic), hold ``hold_s`` after the answer, close; what happened."""
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
    out: dict = {"began": time.monotonic(), "outcome": "failed"}
    try:
        async with websockets.connect(
            stream.url, additional_headers=stream.headers, open_timeout=60, max_size=2**22, compression=None
        ) as ws:
            out["open"] = time.monotonic()
            await ws.send(METADATA)
            sender = asyncio.create_task(_silence(ws)) if audio else None
            try:
                async with asyncio.timeout(60):
                    async for raw in ws:
                        if isinstance(raw, str) and '"session_started"' in raw:
                            out.update(outcome="accepted", answered=time.monotonic())
                            break
                if out["outcome"] == "accepted":
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(hold_s):
                            async for _ in ws:  # greeting audio and events: read, as a provider does
                                pass
            finally:
                if sender is not None:
                    sender.cancel()
            out["client_closed"] = True
    except websockets.ConnectionClosed as exc:
        rcvd = exc.rcvd
        out.update(
            outcome="refused" if out["outcome"] == "failed" else "closed_by_server",
            answered=out.get("answered", time.monotonic()),
            code=rcvd.code if rcvd else None,
            reason=rcvd.reason if rcvd else "no close frame",
        )
    except (OSError, websockets.InvalidHandshake, TimeoutError) as exc:
        out["error"] = f"{type(exc).__name__}: {str(exc)[:80]}"
    return out


async def _silence(ws) -> None:
    """20 ms silent frames in real time (the provider streams silence too)."""
    next_at = time.monotonic()
    with contextlib.suppress(websockets.ConnectionClosed):
        while True:
            next_at += FRAME_MS / 1000
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            await ws.send(FRAME)


def _run_share(args: tuple[list[Stream], float, float, bool]) -> list[dict]:
    streams, start_at, hold_s, audio = args

    async def main() -> list[dict]:
        return list(await asyncio.gather(*(_one_stream(s, start_at, hold_s, audio) for s in streams)))

    try:
        import uvloop

        return uvloop.run(main())
    except ImportError:
        return asyncio.run(main())


def burst(streams: list[Stream], start_at: float, hold_s: float, audio: bool, processes: int) -> list[dict]:
    """Open every stream at ``start_at`` from ``processes`` processes; their outcomes (blocking)."""
    shares = [(streams[p::processes], start_at, hold_s, audio) for p in range(processes)]
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        parts = pool.map(_run_share, shares)
    return [outcome for part in parts for outcome in part]


class Bystander:
    """A browser conversation that types a turn every ``interval`` s and times each answer."""

    def __init__(self, url: str, interval: float = 0.5, text: str = "hello", timeout: float = 30.0):
        self.url, self.interval, self.text, self.timeout = url, interval, text, timeout
        self.turns: list[dict] = []  # {"at", "echo_ms", "reply_ms", "audio_ms"}; None: not within timeout
        self.errors: list[str] = []
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self, ready: asyncio.Event) -> None:
        """Start the conversation, let the greeting play, set ``ready``, then take turns until stopped."""
        async with websockets.connect(self.url, max_size=2**22, compression=None) as ws:
            await ws.send(json.dumps({"type": "config", "payload": {"scenario": "default"}}))
            await ws.send(json.dumps({"type": "control", "payload": {"action": "start"}}))
            await self._until(ws, lambda m: m.get("type") == "response" and m["payload"].get("final"))
            await self._quiet(ws, 0.5)
            ready.set()
            while not self._stop.is_set():
                await self._turn(ws)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self.interval)

    async def _turn(self, ws) -> None:
        sent = time.monotonic()
        await ws.send(json.dumps({"type": "text", "payload": {"text": self.text}}))
        turn: dict = {"at": sent, "echo_ms": None, "reply_ms": None, "audio_ms": None}
        try:
            async with asyncio.timeout(self.timeout):
                while turn["audio_ms"] is None or turn["reply_ms"] is None:
                    message = json.loads(await ws.recv())
                    kind, payload, now = message.get("type"), message.get("payload") or {}, time.monotonic()
                    ms = round((now - sent) * 1000, 2)
                    if kind == "transcript" and payload.get("speaker") == "user" and turn["echo_ms"] is None:
                        turn["echo_ms"] = ms
                    elif kind == "response" and turn["reply_ms"] is None:
                        turn["reply_ms"] = ms
                    elif kind == "audio" and turn["audio_ms"] is None and turn["reply_ms"] is not None:
                        turn["audio_ms"] = ms
                    elif kind == "error":
                        self.errors.append(f"{payload.get('code')}: {payload.get('message')}"[:120])
            await self._quiet(ws, 0.3)  # the rest of the answer arrives before the next turn
        except TimeoutError:
            self.errors.append(f"no answer within {self.timeout:g} s")
        self.turns.append(turn)

    async def _until(self, ws, predicate) -> dict:
        async with asyncio.timeout(self.timeout):
            while True:
                message = json.loads(await ws.recv())
                if predicate(message):
                    return message

    @staticmethod
    async def _quiet(ws, seconds: float) -> None:
        """Read until nothing arrived for ``seconds``."""
        with contextlib.suppress(TimeoutError):
            while True:
                await asyncio.wait_for(ws.recv(), seconds)
