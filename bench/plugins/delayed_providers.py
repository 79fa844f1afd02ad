"""LIFECYCLE_PLUGINS module for ``bench_capacity.py --mode cloud``: speech providers that answer
with cloud-like delays, leased through the real speech pools.

Why: the instant providers of ``instant_providers.py`` bypass the pools, so a benchmark with them
never meets a pool limit. Here the pools are the very ``ClientPool`` objects the configured
providers built in startup step 2 (sized and limited by their ``from_config``, whatever that does
today); only what they lease changes: a permit for a remote recognition or synthesis, as the
Azure providers lease (``_RecognitionSlot``). A refusal is the pool's ``PoolTimeout`` turned
into the same "busy" ``ProviderError`` the real providers raise.

* STT: ``finish()`` returns the final transcript ``utterance <n>`` a random 100-300 ms later
  (``BENCH_STT_DELAY_MS``); interim hypotheses every 300 ms of audio while the caller speaks.
* TTS: the first 100 ms chunk comes a random 80-200 ms after the request
  (``BENCH_TTS_DELAY_MS``), the rest at 5x real time, 300 ms of quiet tone per word.

Each provider delay is recorded per utterance (the answer of the chat peer starts with
``Noted <n>.``, so the TTS knows which utterance it speaks for) and written as JSON to
``BENCH_DELAYS_FILE.<pid>`` when the server (each worker process) shuts down, for the benchmark to
subtract; so are ``time.monotonic`` stamps of each utterance at the provider calls (the chat
provider's ``stream`` is wrapped to stamp its request and first text), to split the server's own
time into stages, and the event loop's lateness on a 10 ms ticker and the garbage collector's
pauses.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import os
import random
import re
import time
from collections.abc import AsyncIterator, Callable

import numpy as np

from voiceagent.conversation.providers import ProviderError
from voiceagent.speech.pools import POOLS, ClientPool, PoolTimeout

KEY = re.compile(r"^Noted (\d+)\.")
RATE = 24000
CHUNK_MS = 100
MS_PER_WORD = 300
SPEEDUP = 5  # TTS services stream faster than real time
DELAYS: dict[str, dict] = {"stt": {}, "tts": {}, "stamps": {}}
UTTERANCE = re.compile(r"utterance (\d+)")


def stamp(key: str, what: str) -> None:
    """When (``time.monotonic``, one clock for every process here) utterance ``key`` passed a point."""
    DELAYS["stamps"].setdefault(key, {})[what] = time.monotonic()


def _range(name: str, default: str) -> tuple[float, float]:
    low, _, high = os.environ.get(name, default).partition("-")
    return float(low) / 1000, float(high or low) / 1000


class _Permit:
    """What the pool leases: the right to one remote recognition or synthesis."""

    __slots__ = ()


def _adopt(pool: ClientPool, provider: str) -> ClientPool:
    """The configured provider's own pool, leasing permits instead of its clients (it was built but
    never warmed, so it holds none of them)."""
    pool.factory = _Permit
    pool.closer = None
    pool.provider = provider
    return pool


def _busy(what: str, exc: PoolTimeout) -> ProviderError:
    return ProviderError(f"speech {what} busy: {exc}")  # what the real providers say


class DelayedStream:
    def __init__(self, owner: DelayedSTT, permit: _Permit, on_interim: Callable[[str], None]):
        self.owner, self.permit, self.on_interim = owner, permit, on_interim
        self.key = next(owner.keys)
        self.bytes = 0
        self.released = False

    async def push(self, pcm16: bytes) -> None:
        before, self.bytes = self.bytes, self.bytes + len(pcm16)
        if self.bytes // 9600 > before // 9600:  # every 300 ms of 16 kHz audio
            self.on_interim("utterance")

    async def finish(self) -> str:
        delay = self.owner.rng.uniform(*self.owner.delay)
        DELAYS["stt"][str(self.key)] = delay * 1000
        stamp(str(self.key), "stt_finish")
        try:
            await asyncio.sleep(delay)
        finally:
            await self._release()
        stamp(str(self.key), "stt_final")
        return f"utterance {self.key}"

    async def cancel(self) -> None:
        await self._release()

    async def _release(self) -> None:
        if not self.released:
            self.released = True
            await self.owner.pool.release(self.permit)


class DelayedSTT:
    name = "bench-delayed-stt"
    sample_rate = 16000

    def __init__(self, pool: ClientPool):
        self.pool = _adopt(pool, self.name)
        self.delay = _range("BENCH_STT_DELAY_MS", "100-300")
        self.rng = random.Random(1)
        self.keys = itertools.count(os.getpid() * 1_000_000 + 1)  # unique across worker processes

    async def open(self, language: str, on_interim: Callable[[str], None]) -> DelayedStream:
        try:
            permit = await self.pool.acquire()
        except PoolTimeout as exc:
            raise _busy("recognition", exc) from None
        return DelayedStream(self, permit, on_interim)

    async def warm(self) -> int:
        return await self.pool.warm()

    async def close(self) -> None:
        await self.pool.close()


class DelayedTTS:
    name = "bench-delayed-tts"
    sample_rate = RATE

    def __init__(self, pool: ClientPool):
        self.pool = _adopt(pool, self.name)
        self.delay = _range("BENCH_TTS_DELAY_MS", "80-200")
        self.rng = random.Random(2)
        t = np.arange(RATE * CHUNK_MS // 1000) / RATE
        self.chunk = (np.sin(2 * np.pi * 200 * t) * 800).astype("<i2").tobytes()

    async def synthesize(self, text: str, voice) -> AsyncIterator[bytes]:
        try:
            permit = await self.pool.acquire()
        except PoolTimeout as exc:
            raise _busy("synthesis", exc) from None
        try:
            delay = self.rng.uniform(*self.delay)
            key = m.group(1) if (m := KEY.match(text)) else None
            if key:
                DELAYS["tts"][key] = delay * 1000
                stamp(key, "tts_request")
            await asyncio.sleep(delay)
            for i in range(max(1, len(text.split()) * MS_PER_WORD // CHUNK_MS)):
                if i:
                    await asyncio.sleep(CHUNK_MS / 1000 / SPEEDUP)
                elif key:
                    stamp(key, "tts_first_chunk")
                yield self.chunk
        finally:
            await self.pool.release(permit)

    async def warm(self) -> int:
        return await self.pool.warm()

    async def close(self) -> None:
        await self.pool.close()


def _timed(stream):
    """The chat provider's ``stream``, stamping when a turn's request starts and its first text
    arrives (so the benchmark can say where the server's time goes)."""

    async def timed(request):
        users = [m.get("content") for m in request.messages if m.get("role") == "user"]
        found = UTTERANCE.search(str(users[-1])) if users else None
        key = found.group(1) if found else None
        if key:
            stamp(key, "chat_request")
        async for chunk in stream(request):
            if key and chunk.text:
                stamp(key, "chat_first_text")
                key = None
            yield chunk

    return timed


async def _stamp_request(request) -> None:
    """httpx request hook: the openai client has built the chat request and sends it now."""
    keys = UTTERANCE.findall(request.content.decode(errors="replace")) if request.content else []
    if keys:
        stamp(keys[-1], "chat_send")  # the history holds the earlier turns' utterances first


async def _ticker(lags: list[float]) -> None:
    """The event loop's lateness: how much later than asked a 10 ms sleep wakes up (ms; measured on
    ``time.monotonic``: uvloop's ``loop.time()`` counts whole milliseconds)."""
    while True:
        want = time.monotonic() + 0.01
        await asyncio.sleep(0.01)
        lags.append((time.monotonic() - want) * 1000)


def _watch_gc(pauses: dict[str, list[float]]) -> None:
    """Record every garbage collection's pause (ms) by generation: a stop-the-world the loop feels."""
    began = [0.0]

    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            pauses.setdefault(f"gen{info['generation']}", []).append((time.perf_counter() - began[0]) * 1000)

    gc.callbacks.append(callback)


def register(cycle) -> None:
    from voiceagent.runtime import runtime

    lags: list[float] = DELAYS.setdefault("loop_lag_ms", [])
    tasks: list[asyncio.Task] = []

    async def watch() -> str:  # a deferred step: after startup's own full collection and gc.freeze()
        tasks.append(asyncio.get_running_loop().create_task(_ticker(lags)))
        _watch_gc(DELAYS.setdefault("gc_ms", {}))
        return "benchmark: loop lag and GC pauses recorded"

    async def swap() -> str:
        runtime.stt = DelayedSTT(runtime.stt.pool)
        runtime.tts = DelayedTTS(runtime.tts.pool)
        runtime.chat.stream = _timed(runtime.chat.stream)
        http = getattr(getattr(runtime.chat, "_client", None), "_client", None)  # the openai client's httpx
        if http is not None:
            http.event_hooks["request"].append(_stamp_request)
        POOLS["stt"], POOLS["tts"] = runtime.stt.pool, runtime.tts.pool
        return "benchmark: delayed speech providers on the configured pools"

    def dump() -> None:
        for task in tasks:
            task.cancel()
        DELAYS["gc_tracked_objects"] = {"collected": len(gc.get_objects()), "frozen": gc.get_freeze_count()}
        path = os.environ.get("BENCH_DELAYS_FILE")
        if path:  # one file per worker process
            with open(f"{path}.{os.getpid()}", "w") as f:
                json.dump(DELAYS, f)

    cycle.register("aoai", "bench-delayed-speech", start=swap, stop=dump)
    cycle.register("warmup", "bench-watch", start=watch)
