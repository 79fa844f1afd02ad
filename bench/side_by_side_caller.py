"""The caller of bench/bench_vs_pipecat.py: the same clip, paced in real time (20 ms frames of 16 kHz
PCM16), sent to the service's browser socket or to the Pipecat peer's socket, with the first agent
audio after each turn's end of speech timed on arrival.

The clip (:func:`make_clip`): ``lead_s`` of faint noise while the greeting plays, then ``turns``
times the caller's speech (trimmed to its voiced part) followed by ``tail_s`` of faint noise while
the answer plays. "End of speech" of a turn is the instant the caller sends the frame holding the
last sample of speech; the end of turn of that turn is the time from then to the first agent
audio frame that arrives after it, however late (an answer that arrives while the caller already
says the next turn is still that turn's answer, timed as such: a server that falls behind shows
it in its end of turn). Only the first frame of an answer counts (audio after a gap over
``BURST_GAP_S``): the rest of an answer still playing is not a new one. An answer that starts
while the caller speaks, the turn before already answered, is an answer to words not finished
yet (a VAD that cut the caller off, or a late greeting): that turn counts as ``early``; a turn with
no answer by the end of the clip counts as ``missing``; neither is timed.

Both servers get the same bytes on the same schedule; only the envelope differs: the service's
protocol (docs/api.md: ``config`` + ``control start``, binary caller frames, JSON ``audio``
messages back) or the peer's (binary PCM both ways, JSON text for its transport messages)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import random
import time
from dataclasses import dataclass, field

import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

FRAME_MS, RATE = 20, 16000
FRAME_BYTES = RATE * FRAME_MS // 1000 * 2
PROTOCOLS = ("ours", "pipecat")
BURST_GAP_S = 0.25  # agent audio after a longer gap starts a new answer (both pace theirs in real time)


@dataclass
class Clip:
    """The frames one caller sends, and which of them ends each turn's speech."""

    frames: list[bytes]
    speech_ends: list[int]  # index of the frame holding the last speech sample, one per turn
    speech_starts: list[int]

    @property
    def seconds(self) -> float:
        return len(self.frames) * FRAME_MS / 1000


def noise(n_frames: int, seed: int = 1, dbfs: float = -60.0) -> list[bytes]:
    """White noise at ``dbfs`` (RMS; -60: the other benches' faint line hiss): silence to either
    VAD. The service's energy gate (-45 dBFS) skips Silero below it; above it, Silero runs."""
    rng = np.random.default_rng(seed)
    rms = 32768 * 10 ** (dbfs / 20)
    pcm = (
        np.clip(rng.standard_normal(n_frames * FRAME_BYTES // 2) * rms, -32768, 32767).astype("<i2").tobytes()
    )
    return [pcm[i : i + FRAME_BYTES] for i in range(0, len(pcm), FRAME_BYTES)]


def make_clip(speech: bytes, turns: int, lead_s: float, tail_s: float, noise_dbfs: float = -60.0) -> Clip:
    """``lead_s`` of noise, then ``turns`` x (speech, ``tail_s`` of noise); the speech's last frame is
    padded with noise, never cut."""
    frames = noise(round(lead_s * 1000 / FRAME_MS), seed=0, dbfs=noise_dbfs)
    starts, ends = [], []
    for t in range(turns):
        starts.append(len(frames))
        for i in range(0, len(speech), FRAME_BYTES):
            piece = speech[i : i + FRAME_BYTES]
            frames.append(piece + noise(1, seed=100 + t, dbfs=noise_dbfs)[0][len(piece) :])
        ends.append(len(frames) - 1)
        frames += noise(round(tail_s * 1000 / FRAME_MS), seed=t + 1, dbfs=noise_dbfs)
    return Clip(frames, ends, starts)


@dataclass
class Results:
    """What every caller of one run measured."""

    end_of_turn_ms: list[float] = field(default_factory=list)
    early: int = 0
    missing: int = 0
    session_s: float = 0.0  # the sum of the callers' connected time
    send_lag_ms: list[float] = field(default_factory=list)
    errors: collections.Counter = field(default_factory=collections.Counter)


class _Turns:
    """Arrival times of agent audio, matched with the turns' end of speech."""

    def __init__(self, clip: Clip) -> None:
        self.clip = clip
        self.speech_end_at: dict[int, float] = {}  # turn -> when its last speech frame was sent
        self.speech_start_at: dict[int, float] = {}
        self.first_audio: dict[int, float] = {}  # turn -> first agent audio after its end of speech
        self.early: set[int] = set()
        self.last_audio = float("-inf")
        self.turn = -1  # the turn being spoken or answered (-1: the greeting)
        self.speaking = False

    def audio(self, now: float) -> None:
        starts = now - self.last_audio > BURST_GAP_S  # the first frame of an answer, not its sequel
        self.last_audio = now
        if self.turn < 0 or not starts:
            return
        if self.speaking:
            previous = self.turn - 1
            if previous >= 0 and previous not in self.first_audio and previous not in self.early:
                self.first_audio[previous] = now  # a late answer to the turn before
            else:
                self.early.add(self.turn)
        elif self.turn not in self.first_audio:
            self.first_audio[self.turn] = now


async def _call(url: str, protocol: str, clip: Clip, delay: float, res: Results) -> None:
    await asyncio.sleep(delay)
    turns = _Turns(clip)
    try:
        ws = await asyncio.wait_for(connect(url, max_size=2**22, compression=None), 15)
    except (OSError, InvalidHandshake, TimeoutError) as exc:
        res.errors[f"connect: {type(exc).__name__}"] += 1
        return
    opened = time.monotonic()

    async def read() -> None:
        with contextlib.suppress(ConnectionClosed):
            async for message in ws:
                now = time.monotonic()
                if isinstance(message, bytes):
                    turns.audio(now)
                elif protocol == "ours":
                    kind = json.loads(message).get("type")
                    if kind == "audio":
                        turns.audio(now)
                    elif kind == "error":
                        res.errors[f"error message: {json.loads(message)['payload'].get('code')}"] += 1

    reader = asyncio.create_task(read())
    try:
        if protocol == "ours":
            await ws.send(
                json.dumps({"type": "config", "payload": {"scenario": "default", "sample_rate": RATE}})
            )
            await ws.send(json.dumps({"type": "control", "payload": {"action": "start"}}))
        starts, ends = set(clip.speech_starts), {e: t for t, e in enumerate(clip.speech_ends)}
        next_at = time.monotonic()
        for i, frame in enumerate(clip.frames):
            wait = next_at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            elif i % 50 == 0:
                res.send_lag_ms.append(round(-wait * 1000, 2))
            if i in starts:
                turns.turn += 1
                turns.speaking = True
                turns.speech_start_at[turns.turn] = time.monotonic()
            await ws.send(frame)
            if i in ends:
                turns.speech_end_at[ends[i]] = time.monotonic()
                turns.speaking = False
            next_at += FRAME_MS / 1000
    except ConnectionClosed as exc:
        res.errors[f"closed by the server: {exc.rcvd.code if exc.rcvd else None}"] += 1
    finally:
        res.session_s += time.monotonic() - opened
        await ws.close()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    for t, end in turns.speech_end_at.items():
        if t in turns.early:
            res.early += 1
        elif t in turns.first_audio:
            res.end_of_turn_ms.append(round((turns.first_audio[t] - end) * 1000, 2))
        else:
            res.missing += 1


def run(url: str, protocol: str, clip: Clip, conversations: int, spread_s: float, seed: int = 7) -> Results:
    """``conversations`` callers at once (each starting within ``spread_s``, the same offsets for
    both servers), each playing the whole clip; their results merged."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    rng = random.Random(seed)
    delays = [rng.uniform(0, spread_s) for _ in range(conversations)]
    res = Results()

    async def main() -> None:
        await asyncio.gather(*(_call(url, protocol, clip, d, res) for d in delays))

    asyncio.run(main())
    return res
