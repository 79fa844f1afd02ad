"""What the caller hears: end of the caller's speech -> the agent's first audio on the wire (issue 30).

The service runs as ``scripts/run`` starts it: daphne, embedded defaults (Whisper tiny.en, the
offline rules dialog, Piper), the ``default`` scenario. Callers talk to it like outside clients,
in real time (20 ms frames paced by the clock), in voices the service does not speak with (espeak-ng
and CMU flite voices, bench/offline_speech_corpus.py), over two wires:

- ``browser``: the browser conversation socket, 16 kHz PCM16 binary frames;
- ``phone``: the phone media stream in ACS's wire format (``AudioData`` JSON, base64 PCM16 at 16 kHz),
  the caller's audio first squeezed through the telephone line: resampled to 8 kHz, mu-law
  encoded and decoded, resampled back (what ACS hands over of a PSTN call).

Each conversation lets the greeting play out, then says its lines one after the other (the first
turn included), waiting for each answer to play out and thinking 0.4-1.0 s before the next line.

**Latency** of a turn: from the moment the caller sent its last frame with speech energy (a 20 ms
frame whose RMS is above ``SPEECH_RMS``, i.e. the end of the words, not of the trailing silence) to
the arrival of the first agent audio of the answer (``audio`` message / outbound ``AudioData``).
Agent audio that arrives while the caller is still speaking its line counts as ``talked_over``;
a line with no answer within ``--answer-timeout`` counts as ``unanswered``. Both are errors.

Phases: ``one`` (conversations one at a time, browser and phone alternating) and ``concurrent``
(``--concurrent`` conversations at once, half on each wire, starting within a second). Targets:
one at a time median <= 500 ms and p95 <= 800 ms; 16 at once median <= 700 ms.

Besides the latency: the server's own breakdown of the browser turns (``turn_metrics``: end of turn
-> first audio, STT, first token, TTS first audio), and the word error rate of the final
transcripts against the lines said (normalised as bench_offline_speech does).

    .venv/bin/python bench/bench_voice_latency.py [--phases one,concurrent] [--conversations 8]
        [--concurrent 16] [--lines 5] [--quick] [--details FILE]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import numpy as np
import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "support"))
from caller_clips import FRAME, FRAME_MS, LINES, RATE, Clip, caller_clips  # noqa: E402
from harness import pct, server_problems  # noqa: E402
from offline_speech_corpus import Voice, edit_distance, normalise  # noqa: E402
from proc_cpu import cpu_isa, python_speed  # noqa: E402
from servers import base_env, free_port, migrate, start, wait_http  # noqa: E402

NOISE = (np.random.default_rng(7).standard_normal(FRAME) * 20).astype("<i2").tobytes()  # line hiss
TARGET_ONE_P50_MS, TARGET_ONE_P95_MS, TARGET_CONCURRENT_P50_MS = 500, 800, 700


@dataclass
class Turn:
    conversation: int
    wire: str
    voice: str
    line: str
    first: bool
    latency_ms: float | None = None
    heard: str | None = None
    error: str | None = None
    server: dict = field(default_factory=dict)  # turn_metrics latency_ms (browser)


class Listener:
    """The agent audio and transcripts a caller receives (times: ``time.monotonic()``)."""

    def __init__(self) -> None:
        self.first_audio: float | None = None
        self.last_audio = 0.0
        self.audio_s = 0.0
        self.audio_total = 0
        self.finals: list[str] = []
        self.metrics: list[dict] = []
        self.errors: list[str] = []
        self.ended = False
        self.arrived = asyncio.Event()

    def reset(self) -> None:
        self.first_audio, self.last_audio, self.audio_s = None, 0.0, 0.0
        self.arrived = asyncio.Event()

    def audio(self, seconds: float) -> None:
        now = time.monotonic()
        if self.first_audio is None:
            self.first_audio = now
            self.arrived.set()
        self.last_audio = now
        self.audio_s += seconds
        self.audio_total += 1

    def played_out(self) -> bool:
        now = time.monotonic()
        return (
            self.first_audio is not None
            and now - self.last_audio > 0.35
            and now > self.first_audio + self.audio_s + 0.15
        )


class Wire:
    """One caller's socket: how frames go out and what comes back, per wire format."""

    name = ""

    def __init__(self, base: str) -> None:
        self.base = base
        self.ws = None
        self.listener = Listener()

    async def open(self) -> None:
        raise NotImplementedError

    def encode(self, pcm: bytes) -> bytes | str:
        raise NotImplementedError

    def parse(self, raw: bytes | str) -> None:
        raise NotImplementedError

    async def read(self) -> None:
        try:
            async for raw in self.ws:
                self.parse(raw)
        except websockets.ConnectionClosed:
            pass
        self.listener.ended = True


class BrowserWire(Wire):
    name = "browser"

    async def open(self) -> None:
        self.ws = await websockets.connect(f"{self.base}/api/v1/browser/conversation", max_size=2**22)
        first = json.loads(await self.ws.recv())
        assert first["payload"]["name"] == "session_started", first
        config = {"scenario": "default", "sample_rate": RATE}
        await self.ws.send(json.dumps({"type": "config", "payload": config}))

    def encode(self, pcm: bytes) -> bytes:
        return pcm

    def parse(self, raw: bytes | str) -> None:
        message = json.loads(raw)
        kind, payload = message.get("type"), message.get("payload") or {}
        if kind == "audio":
            samples = len(base64.b64decode(payload["data"])) // 2
            self.listener.audio(samples / payload.get("sample_rate", 24000))
        elif kind == "transcript" and payload.get("final") and payload.get("speaker", "user") == "user":
            self.listener.finals.append(payload.get("text", ""))
        elif kind == "turn_metrics":
            self.listener.metrics.append(payload.get("latency_ms") or {})
        elif kind == "error":
            self.listener.errors.append(str(payload.get("code")))
        elif kind == "event" and payload.get("name") == "session_ended":
            self.listener.ended = True


class PhoneWire(Wire):
    name = "phone"

    async def open(self) -> None:
        url = f"{self.base}/api/v1/media/stream?scenario=default&events=1"
        self.ws = await websockets.connect(url, max_size=2**22)
        meta = {"subscriptionId": "bench", "encoding": "PCM", "sampleRate": RATE, "channels": 1}
        meta["length"] = FRAME * 2
        await self.ws.send(json.dumps({"kind": "AudioMetadata", "audioMetadata": meta}))

    def encode(self, pcm: bytes) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
        data = base64.b64encode(pcm).decode()
        return (
            '{"kind":"AudioData","audioData":{"timestamp":"' + stamp
            + '","participantRawID":"4:+15550100","data":"' + data + '","silent":false}}'
        )  # fmt: skip

    def parse(self, raw: bytes | str) -> None:
        message = json.loads(raw)
        kind = message.get("kind") or message.get("type")
        if kind == "AudioData":
            data = (message.get("audioData") or {}).get("data", "")
            self.listener.audio(len(base64.b64decode(data)) / 2 / RATE)
        elif kind == "transcript":
            payload = message.get("payload") or {}
            if payload.get("final") and payload.get("speaker", "user") == "user":
                self.listener.finals.append(payload.get("text", ""))
        elif kind == "event" and (message.get("payload") or {}).get("name") == "session_ended":
            self.listener.ended = True


class Caller:
    """Sends a 20 ms frame on the clock: the current line's frames, else line hiss."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.pending: list[bytes] = []
        self.speech_sent = asyncio.Event()  # the last frame with speech energy went out
        self.last_speech_at = 0.0
        self.last_speech_index = -1
        self.stopped = False

    async def pump(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while not self.stopped and not self.wire.listener.ended:
            frame = self.pending.pop(0) if self.pending else NOISE
            await self.wire.ws.send(self.wire.encode(frame))
            if self.last_speech_index == 0:
                self.last_speech_at = time.monotonic()
                self.speech_sent.set()
            self.last_speech_index -= 1
            due += FRAME_MS / 1000
            delay = due - loop.time()
            if delay < -0.2:  # far behind: re-anchor rather than burst
                due = loop.time()
            await asyncio.sleep(max(0.0, delay))

    def say(self, clip: Clip) -> None:
        pcm = clip.pcm[: len(clip.pcm) // FRAME * FRAME]
        self.pending = [pcm[i : i + FRAME].tobytes() for i in range(0, len(pcm), FRAME)]
        self.last_speech_index = clip.last_speech_frame
        self.speech_sent = asyncio.Event()


async def wait_played_out(listener: Listener, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if listener.played_out() or listener.ended:
            return True
        await asyncio.sleep(0.05)
    return False


async def conversation(
    base: str, index: int, wire_name: str, clips: list[Clip], answer_timeout: float, rng: random.Random
) -> list[Turn]:
    wire: Wire = BrowserWire(base) if wire_name == "browser" else PhoneWire(base)
    turns: list[Turn] = []
    await wire.open()
    caller = Caller(wire)
    reader = asyncio.create_task(wire.read())
    pump = asyncio.create_task(caller.pump())
    listener = wire.listener
    try:
        if not await asyncio.wait_for(listener.arrived.wait(), 20) or not await wait_played_out(listener, 30):
            raise RuntimeError("no greeting")
        for n, clip in enumerate(clips):
            turn = Turn(index, wire.name, clip.voice, clip.line, first=n == 0)
            turns.append(turn)
            await asyncio.sleep(rng.uniform(0.4, 1.0))
            finals_before, metrics_before = len(listener.finals), len(listener.metrics)
            listener.reset()
            caller.say(clip)
            await caller.speech_sent.wait()
            spoke_at = caller.last_speech_at
            if listener.first_audio is not None:
                turn.error = "talked_over"  # an answer began before the caller finished the line
            try:
                await asyncio.wait_for(listener.arrived.wait(), answer_timeout)
            except TimeoutError:
                turn.error = turn.error or "unanswered"
            if listener.first_audio is not None and turn.error is None:
                turn.latency_ms = round((listener.first_audio - spoke_at) * 1000, 1)
            await wait_played_out(listener, 30)
            heard = listener.finals[finals_before:]
            turn.heard = " ".join(heard) if heard else None
            if len(listener.metrics) > metrics_before:
                turn.server = listener.metrics[metrics_before]
            if listener.ended:
                turn.error = turn.error or "ended"
                break
    finally:
        caller.stopped = True
        pump.cancel()
        await wire.ws.close()
        reader.cancel()
        await asyncio.gather(pump, reader, return_exceptions=True)
    return turns


def summarise(turns: list[Turn]) -> dict:
    lat = [t.latency_ms for t in turns if t.latency_ms is not None]
    first = [t.latency_ms for t in turns if t.latency_ms is not None and t.first]
    errors: dict[str, int] = {}
    for t in turns:
        if t.error:
            errors[t.error] = errors.get(t.error, 0) + 1
    words = sum(len(normalise(t.line)) for t in turns if t.heard is not None)
    wrong = sum(edit_distance(normalise(t.line), normalise(t.heard)) for t in turns if t.heard is not None)
    stages: dict[str, list[float]] = {}
    for t in turns:
        for key, value in t.server.items():
            if isinstance(value, int | float):
                stages.setdefault(key, []).append(float(value))
    out = {
        "turns": len(turns),
        "measured": len(lat),
        "p50_ms": pct(lat, 50),
        "p95_ms": pct(lat, 95),
        "max_ms": max(lat) if lat else None,
        "first_turn_p50_ms": pct(first, 50),
        "first_turn_max_ms": max(first) if first else None,
        "by_wire_p50_ms": {
            w: pct([t.latency_ms for t in turns if t.wire == w and t.latency_ms is not None], 50)
            for w in ("browser", "phone")
        },
        "by_line_p50_ms": {
            line: pct([t.latency_ms for t in turns if t.line == line and t.latency_ms is not None], 50)
            for line in LINES
        },
        "errors": errors,
        "wer": round(wrong / words, 3) if words else None,
        "server_browser_p50_ms": {k: pct(v, 50) for k, v in sorted(stages.items())},
    }
    return out


async def run_phase(base: str, clips: dict[str, list[Clip]], jobs: list[tuple[int, str, str]], parallel: bool,
                    answer_timeout: float) -> list[Turn]:  # fmt: skip
    async def one(index: int, wire: str, voice: str) -> list[Turn]:
        rng = random.Random(index)
        if parallel:
            await asyncio.sleep(rng.uniform(0, 1.0))
        try:
            return await conversation(base, index, wire, clips[voice], answer_timeout, rng)
        except Exception as exc:  # a conversation that could not run is an error, not a crash
            problem = f"conversation: {type(exc).__name__}: {exc}"[:120]
            return [Turn(index, wire, voice, "", True, error=problem)]

    if parallel:
        results = await asyncio.gather(*(one(*job) for job in jobs))
    else:
        results = [await one(*job) for job in jobs]
    return [t for turns in results for t in turns]


def job(i: int, voices: list[Voice]) -> tuple[int, str, str]:
    """Conversation ``i``: (its number, its wire, the clips it says): wires alternate, voices turn."""
    wire = ("browser", "phone")[i % 2]
    voice = voices[(i // 2 + i) % len(voices)].label
    return i, wire, voice + ("|phone" if wire == "phone" else "")


def write_details(path: str | None, phase: str, turns: list[Turn]) -> None:
    """Append each turn of ``phase`` to ``path`` as a JSON line (nothing without a path)."""
    if not path:
        return
    with open(path, "a", encoding="utf-8") as out:
        for turn in turns:
            out.write(json.dumps({"phase": phase, **asdict(turn)}) + "\n")


def settle(port: int, timeout: float = 10.0) -> None:
    """Wait until the server has closed every conversation the callers hung up (a stop while a
    socket is still being torn down is a shutdown race, not what this bench measures)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        browser = httpx.get(f"http://127.0.0.1:{port}/api/v1/browser/status", timeout=5).json()
        media = httpx.get(f"http://127.0.0.1:{port}/api/v1/media/status", timeout=5).json()
        if not browser.get("active_conversations") and not media.get("active_streams"):
            return
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phases", default="one,concurrent")
    parser.add_argument("--conversations", type=int, default=8, help="phase one: conversations one at a time")
    parser.add_argument("--concurrent", type=int, default=16)
    parser.add_argument("--lines", type=int, default=5)
    parser.add_argument("--answer-timeout", type=float, default=8.0)
    parser.add_argument("--seed", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="4 one at a time, 3 lines, 8 at once")
    parser.add_argument("--server-log", help="keep the server's log here")
    parser.add_argument(
        "--log-level", default="INFO", help="the server's LOG_LEVEL (DEBUG: each end of turn)"
    )
    parser.add_argument("--details", help="write each turn here, one JSON line each (which turns are slow)")
    args = parser.parse_args()
    if args.quick:
        args.conversations, args.lines, args.concurrent = 4, 3, 8
    voices, clips = caller_clips(args.lines, args.seed)

    tmp = Path(tempfile.mkdtemp(prefix="bench-voice-"))
    env = base_env(tmp, LOG_LEVEL=args.log_level)
    env.pop("LIFECYCLE_PLUGINS", None)
    migrate(env)
    port = free_port()
    log = Path(args.server_log) if args.server_log else tmp / "server.log"
    server = start("daphne", port, env, log)
    speed = python_speed()
    figures: dict = {"bench": "voice_latency", "server": "daphne, embedded defaults (scripts/run)"}
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v1/ready", timeout=180, status=200)
        base = f"ws://127.0.0.1:{port}"
        phases = args.phases.split(",")
        if "one" in phases:
            jobs = [job(i, voices) for i in range(args.conversations)]
            turns = asyncio.run(run_phase(base, clips, jobs, False, args.answer_timeout))
            figures["one_at_a_time"] = summarise(turns)
            write_details(args.details, "one", turns)
        if "concurrent" in phases:
            jobs = [job(100 + i, voices) for i in range(args.concurrent)]
            turns = asyncio.run(run_phase(base, clips, jobs, True, args.answer_timeout))
            figures[f"concurrent_{args.concurrent}"] = summarise(turns)
            write_details(args.details, f"concurrent_{args.concurrent}", turns)
        settle(port)
    finally:
        server.terminate()
        try:
            server.wait(15)
        except Exception:
            server.kill()
    one = figures.get("one_at_a_time") or {}
    many = figures.get(f"concurrent_{args.concurrent}") or {}
    figures["voices"] = [v.label for v in voices]
    figures["targets"] = {
        "one_p50_ms": TARGET_ONE_P50_MS,
        "one_p95_ms": TARGET_ONE_P95_MS,
        "concurrent_p50_ms": TARGET_CONCURRENT_P50_MS,
    }
    figures["ok"] = bool(
        one
        and one["p50_ms"] is not None
        and one["p50_ms"] <= TARGET_ONE_P50_MS
        and one["p95_ms"] <= TARGET_ONE_P95_MS
        and not one["errors"]
        and (not many or (many["p50_ms"] is not None and many["p50_ms"] <= TARGET_CONCURRENT_P50_MS))
    )
    figures["server_problems"] = server_problems(log)
    figures["machine_python_loop_ms"] = speed
    figures["machine_cpu_isa"] = cpu_isa()
    figures["command"] = " ".join(["bench/bench_voice_latency.py", *sys.argv[1:]])
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
