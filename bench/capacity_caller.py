"""Simulated browser callers for bench_capacity.py: each opens the browser socket, lets the greeting
play, then speaks utterances in real time (20 ms frames of 16 kHz PCM16, faint noise between them)
and times every turn from its end to the final transcript and to the first audio of the answer.

"End of turn" is when the caller sends the frame that completes ``silence_ms`` of silence after
its last speech frame (the server's ``VAD_SILENCE_TIMEOUT``), as in bench_browser.py. A caller
waits for the answer to finish playing (the audio received, played from its first frame) before
speaking again, so it never barges in, and thinks 0.5-3 s (random) before each turn, so that
callers do not speak in step. Callers run in one or more processes
(:func:`run_processes`): each sends 50 frames a second, and the load generator must not be what
limits the server.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import multiprocessing
import random
import time
from dataclasses import dataclass, field

import websockets
from harness import noise_frame

FRAME_MS, RATE = 20, 16000
FRAME_BYTES = RATE * FRAME_MS // 1000 * 2
NOISE = noise_frame(RATE, FRAME_MS)
GREETING_TIMEOUT_S = 15.0
MAX_LAG_S = 0.2  # a caller late by more re-anchors its schedule rather than burst past the rate limit


@dataclass
class Plan:
    """What every caller does; ``utterances`` are (text said, 16 kHz PCM16 trimmed to the speech)."""

    url: str
    utterances: list[tuple[str, bytes]]
    turns: int
    silence_ms: int
    turn_timeout_s: float = 10.0
    spread_s: float = 3.0  # callers start spread over this many seconds (the ramp)
    pause_s: tuple[float, float] = (0.5, 3.0)  # a caller thinks this long (random) before each turn


@dataclass
class Results:
    turns: list[dict] = field(default_factory=list)  # one per turn: caller, said, final_ms, audio_ms, ...
    errors: collections.Counter = field(default_factory=collections.Counter)
    live: list[tuple[float, float]] = field(default_factory=list)  # per caller: (greeted at, done at)

    def merge(self, other: Results) -> None:
        self.turns += other.turns
        self.errors.update(other.errors)
        self.live += other.live

    def all_live(self) -> tuple[float, float] | None:
        """The span (time.monotonic) when every caller was in its conversation, greeted and not yet
        done: the steady state, past the ramp of connections and before the first caller leaves."""
        if not self.live:
            return None
        begin, end = max(b for b, _ in self.live), min(e for _, e in self.live)
        return (begin, end) if begin < end else None


class _Listener:
    """What the server sent during the current phase (greeting or turn). Times are
    ``time.monotonic()``: one clock with the server's and the peer's stamps (uvloop's
    ``loop.time()`` is cached per loop iteration, in whole milliseconds)."""

    def __init__(self) -> None:
        self.reset(False)
        self.ended = False

    def reset(self, speaking: bool) -> None:
        self.speaking = speaking  # audio now is the late end of an earlier answer, not this turn's
        self.late_audio = 0
        self.first_audio: float | None = None
        self.last_audio = 0.0
        self.audio_s = 0.0
        self.final: tuple[float, str] | None = None
        self.errors: list[str] = []

    def feed(self, message: dict) -> None:
        now, kind, payload = time.monotonic(), message.get("type"), message.get("payload") or {}
        if kind == "audio":
            if self.speaking:
                self.late_audio += 1
                return
            if self.first_audio is None:
                self.first_audio = now
            self.last_audio = now
            self.audio_s += len(payload.get("data", "")) * 3 / 4 / 2 / payload.get("sample_rate", 24000)
        elif kind == "transcript" and payload.get("final") and payload.get("speaker") == "user":
            if self.final is None:
                self.final = (now, payload.get("text", ""))
        elif kind == "error":
            busy = "busy" in str(payload.get("message"))  # a pool or limit refused
            self.errors.append(f"{payload.get('code')}{' (busy)' if busy else ''}")
        elif kind == "event" and payload.get("name") == "session_ended":
            self.ended = True

    def answered(self, now: float) -> bool:
        """The answer has arrived and finished playing."""
        return (
            self.first_audio is not None
            and now - self.last_audio > 0.3
            and now > self.first_audio + self.audio_s + 0.2
        )


async def caller(plan: Plan, index: int, res: Results) -> None:
    rng = random.Random(index)
    await asyncio.sleep(rng.uniform(0, plan.spread_s))
    try:
        async with websockets.connect(plan.url, max_size=2**22) as ws:
            listener = _Listener()

            async def reader() -> None:
                with contextlib.suppress(websockets.ConnectionClosed):  # the sender reports it
                    async for raw in ws:
                        listener.feed(json.loads(raw))

            read_task = asyncio.create_task(reader())
            next_at = time.monotonic()

            async def frame(pcm: bytes) -> None:
                nonlocal next_at
                next_at += FRAME_MS / 1000
                delay = next_at - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                elif delay < -MAX_LAG_S:  # this process was starved: go on from now, no burst
                    next_at = time.monotonic()
                await ws.send(pcm)

            await ws.send(
                json.dumps({"type": "config", "payload": {"scenario": "default", "sample_rate": RATE}})
            )
            await ws.send(json.dumps({"type": "control", "payload": {"action": "start"}}))
            began = time.monotonic()
            while not listener.answered(time.monotonic()) and time.monotonic() - began < GREETING_TIMEOUT_S:
                await frame(NOISE)  # the greeting plays
            if listener.first_audio is None:
                res.errors["no greeting audio"] += 1
            greeted = time.monotonic()
            for t in range(plan.turns):
                said, pcm = plan.utterances[(index + t) % len(plan.utterances)]
                for _ in range(int(rng.uniform(*plan.pause_s) * 1000) // FRAME_MS):
                    await frame(NOISE)  # callers do not all speak at once (nor in step)
                listener.reset(True)
                for i in range(0, len(pcm), FRAME_BYTES):
                    await frame(pcm[i : i + FRAME_BYTES].ljust(FRAME_BYTES, b"\0"))
                for _ in range(plan.silence_ms // FRAME_MS):
                    await frame(NOISE)
                end = time.monotonic()
                if listener.late_audio:
                    res.errors["answer audio while the caller spoke"] += 1
                listener.speaking = False
                while (
                    not listener.answered(time.monotonic()) and time.monotonic() - end < plan.turn_timeout_s
                ):
                    if listener.errors and time.monotonic() - end > 1.0:
                        break
                    await frame(NOISE)
                final = listener.final
                res.turns.append(
                    {
                        "caller": index,
                        "turn": t,
                        "said": said,
                        "heard": final[1] if final else None,
                        "final_ms": round((final[0] - end) * 1000, 2) if final else None,
                        "audio_ms": round((listener.first_audio - end) * 1000, 2)
                        if listener.first_audio
                        else None,
                        "errors": listener.errors,
                        "end_at": end,  # time.monotonic, comparable with the server's stamps
                        "audio_at": listener.first_audio,
                    }
                )
                for code in listener.errors:
                    res.errors[f"error message {code}"] += 1
                if listener.ended:
                    res.errors["conversation ended by the agent"] += 1
                    break
            res.live.append((greeted, time.monotonic()))
            read_task.cancel()
    except websockets.ConnectionClosed as exc:
        rcvd = exc.rcvd
        res.errors[f"closed: {rcvd.code} {rcvd.reason}" if rcvd else "closed without a close frame"] += 1
    except (OSError, websockets.InvalidHandshake, TimeoutError) as exc:
        res.errors[f"connect failed: {type(exc).__name__}: {str(exc)[:80]}"] += 1


def _run_share(args: tuple[Plan, list[int]]) -> Results:
    plan, indices = args
    res = Results()

    async def main() -> None:
        await asyncio.gather(*(caller(plan, i, res) for i in indices))

    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
    return res


def run_processes(plan: Plan, callers: int, processes: int) -> Results:
    """Run ``callers`` callers split over ``processes`` processes; their results merged."""
    shares = [(plan, list(range(p, callers, processes))) for p in range(max(1, min(processes, callers)))]
    with multiprocessing.get_context("fork").Pool(len(shares)) as pool:
        parts = pool.map(_run_share, shares)
    res = Results()
    for part in parts:
        res.merge(part)
    return res
