"""The contact-center AudioHook v2 bridge under load: N concurrent sessions on ONE server process.

What: ``/api/v1/contactcenter/stream`` (bridge/consumer.py) in the real service (one uvicorn
process, tests/support/servers.py), with the realtime voice API it always uses played by the local
realtime peer (tests/support/realtime_peer.py) in a separate process at nice 10, as
bench_live_relay.py starts it. The service reaches the peer through its own configuration:
``--client voicelive`` sets ``REALTIME_PROVIDER=voicelive`` + ``CLOUD_REALTIME_VOICE_ENDPOINT`` /
``_API_KEY`` / ``_MODEL`` (azure-ai-voicelive over aiohttp), ``--client openai`` sets
``REALTIME_PROVIDER=openai`` + ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` / ``OPENAI_MODEL`` (the
openai SDK over websockets). ``CONTACTCENTER_API_KEY`` / ``_CLIENT_SECRET`` are unset (no
authentication) and ``CONTACTCENTER_MAX_SESSIONS`` is raised above ``--sessions``.

How: each session is a strict AudioHook client (tests/support/audiohook_client.py: it checks
version, id, the server's seq 1, 2, 3 ... and ``clientseq`` on every message) over a real
``websockets`` connection, started at a random moment of the first ``--ramp`` seconds. It sends
the AudioHook headers and ``open`` (PCMU 8 kHz external mono, a random conversationId, a
participant with an ani, ``inputVariables {"promptName": "default"}``), waits for ``opened``
(gives up after 5 s, as a contact center does), then streams caller audio in real time as binary
mu-law frames of 200 ms (1600 bytes): 1 s of silence (the greeting plays), then turns of 1 s of a
voiced tone and 3 s of silence (the peer's VAD hears the speech, waits out
``VAD_SILENCE_TIMEOUT`` = 500 ms of silence and answers). ``ping`` goes out right after ``opened``
and every 5 s (``serverseq`` = the last server seq seen), and its ``pong`` must arrive before the
next one. At the end: ``close`` -> ``closed`` within 10 s -> the socket closes.

The peer answers each turn with ``--answer-chunks`` deltas of ``--chunk-ms`` (1.5 s of audio)
``--interval`` apart, i.e. faster than real time as a real realtime API streams, so the bridge's
queue holds the answer and its pacer alone decides when frames leave (a peer that trickles audio
at exactly real time would measure its own delivery, not our pacing).

Measured (client clock; sessions that fail to open do not count in the figures):

1. ``opened`` latency: ``open`` sent -> ``opened`` received, p50/p99 (includes the realtime
   connect, the session row and the ``session.update``).
2. Outbound pacing: the bridge sends agent audio as 250 ms mu-law frames, two at once (one of
   lead) then one every 250 ms; per answer, |inter-arrival gap - 250 ms| between consecutive frames
   from frame 2 on (both on the schedule; the lead frame leaves as soon as its audio is there), p99
   over all answers (``pacing_gaps`` of them).
3. Answer latency: the last voiced frame of a turn sent -> the first audio frame of the answer
   received. It contains the peer's VAD silence wait (500 ms, counted in samples, i.e. three more
   200 ms frames of real time), so it is context, not a target.
4. Errors: connection failures, the socket closing before our ``close``, protocol violations
   (the strict client's checks, a pong whose ``clientseq`` is not its ping's seq), ``disconnect``
   messages, missing pongs, no ``opened`` within 5 s, no ``closed`` within 10 s, turns without an
   answer, and WARNING/ERROR lines in the server log. ``barge_in`` events are counted apart.
5. Server CPU: (utime + stime) of the uvicorn process from /proc/<pid>/stat over the window from
   the moment every session has opened until the first one stops streaming, per wall second
   (1.0 = one core).

Prints ONE JSON line; ``ok`` = no errors, ``pacing_jitter_p99_ms`` <= 20, no frame later than
the one frame of lead the client holds (``pacing_jitter_max_ms`` < 250: the contact center never
runs dry) and ``opened_p99_ms`` <= 4000 (a contact center gives up after 5 s).

    .venv/bin/python bench/bench_audiohook.py [--sessions 100] [--seconds 30] [--client voicelive|openai]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))
from audiohook_client import ORG, AudioHookClient, over_websockets  # noqa: E402
from harness import pct, server_problems, start_realtime_peer  # noqa: E402
from servers import base_env, free_port, migrate, start, wait_http  # noqa: E402

from voiceagent.speech.audio import ulaw_encode  # noqa: E402

KEY = "bench-realtime-key"
MODEL = "gpt-realtime"
PATH = "/api/v1/contactcenter/stream"
RATE, FRAME_MS = 8000, 200
FRAME = RATE * FRAME_MS // 1000  # 1600 samples = 1600 mu-law bytes
OUT_MS = 250  # the bridge's outbound frame (bridge.consumer.CHUNK_MS)
OUT_LEAD = 2  # frames 0 and 1 leave together (one frame of lead)
GREETING_FRAMES = 5  # 1 s of silence after `opened`: the greeting plays
TONE_FRAMES, SILENCE_FRAMES = 5, 15  # a turn: 1 s voiced, 3 s quiet (the answer arrives and plays)
PING_EVERY = 25  # frames: 5 s
OPEN_TIMEOUT_S, CLOSE_TIMEOUT_S = 5.0, 10.0
PACING_TARGET_MS, OPENED_TARGET_MS = 20.0, 4000.0
PACING_MAX_MS = 250.0  # the one frame of lead: later than that and the contact center runs dry
_t = np.arange(FRAME) / RATE
TONE = ulaw_encode((np.sin(2 * np.pi * 250 * _t) * 8000).astype("<i2"))  # whole periods: seamless
SILENCE = ulaw_encode(np.zeros(FRAME, dtype="<i2"))


@dataclass
class Results:
    opened_ms: list[float] = field(default_factory=list)
    answer_ms: list[float] = field(default_factory=list)
    jitter_ms: list[float] = field(default_factory=list)
    frames_per_answer: collections.Counter = field(default_factory=collections.Counter)
    pong_ms: list[float] = field(default_factory=list)
    answers: int = 0
    expected_answers: int = 0
    barge_ins: int = 0
    errors: collections.Counter = field(default_factory=collections.Counter)
    opened_count: int = 0
    finished: int = 0  # sessions done opening (opened or failed)
    all_opened: asyncio.Event = field(default_factory=asyncio.Event)
    first_done: asyncio.Event = field(default_factory=asyncio.Event)


def headers(session_id: str) -> dict[str, str]:
    return {
        "Audiohook-Organization-Id": ORG,
        "Audiohook-Session-Id": session_id,
        "Audiohook-Correlation-Id": str(uuid.uuid4()),
    }


def position(frames: int) -> str:
    return f"PT{frames * FRAME_MS / 1000:.1f}S"


class Session:
    """One contact-center session: a reader task for everything the server sends, the caller's
    audio and pings from the session task."""

    def __init__(self, ws, session_id: str, res: Results, sessions: int):
        self.ws = ws
        self.res = res
        self.sessions = sessions
        self.client = AudioHookClient(over_websockets(ws), session_id=session_id)
        self.loop = asyncio.get_running_loop()
        self.opened = asyncio.Event()
        self.closed_msg = asyncio.Event()
        self.socket_closed = asyncio.Event()
        self.close_sent = False
        self.disconnected = False
        self.ping_seq: int | None = None  # the ping waiting for its pong
        self.ping_at = 0.0

    def error(self, what: str) -> None:
        self.res.errors[what] += 1

    async def reader(self) -> None:
        client = self.client
        try:
            while True:
                # binary frames are collected on the way, stamped on arrival (client.audio_frames)
                message = await client.next_message(3600)
                if message is None:
                    if not self.close_sent and not self.disconnected:
                        code = self.ws.close_code
                        self.error(f"socket closed by the server before our close (code {code})")
                    return
                self.on_message(message)
        except AssertionError as exc:  # the strict client's checks
            self.error(f"protocol: {str(exc)[:120]}")
        except (TimeoutError, websockets.ConnectionClosed) as exc:
            self.error(f"reader: {type(exc).__name__}")
        finally:
            self.socket_closed.set()

    def on_message(self, message: dict) -> None:
        kind = message["type"]
        if kind == "opened":
            self.opened.set()
        elif kind == "pong":
            if self.ping_seq is None:
                self.error("pong without a ping")
            elif message.get("clientseq") != self.ping_seq:
                self.error("protocol: pong clientseq is not the ping's seq")
            else:
                self.res.pong_ms.append((self.loop.time() - self.ping_at) * 1000)
            self.ping_seq = None
        elif kind == "closed":
            self.closed_msg.set()
        elif kind == "disconnect":
            params = message.get("parameters") or {}
            self.error(f"disconnect {params.get('reason')}: {str(params.get('info'))[:100]}")
            self.disconnected = True
            self.opened.set()  # unblocks a session waiting for `opened`
        elif kind == "event":
            entities = (message.get("parameters") or {}).get("entities") or []
            if any(e.get("type") == "barge_in" for e in entities):
                self.res.barge_ins += 1
            else:
                self.error(f"unexpected event {[e.get('type') for e in entities]}"[:80])
        else:
            self.error(f"unexpected message {str(kind)[:40]}")

    async def run(self, turns: int) -> None:
        res, client, loop = self.res, self.client, self.loop
        read_task = asyncio.create_task(self.reader())
        counted = False
        try:
            sent = loop.time()
            await client.open(input_variables={"promptName": "default"})
            try:
                async with asyncio.timeout(OPEN_TIMEOUT_S):
                    await self.opened.wait()
            except TimeoutError:
                self.error("no opened within 5 s")
                return
            if self.disconnected or self.socket_closed.is_set():
                return
            res.opened_ms.append((loop.time() - sent) * 1000)
            res.opened_count += 1
            self.mark_open_done()
            counted = True
            await self.stream(turns)
        finally:
            if not counted:
                self.mark_open_done()
            await self.finish(read_task)

    def mark_open_done(self) -> None:
        self.res.finished += 1
        if self.res.finished == self.sessions:
            self.res.all_opened.set()

    async def stream(self, turns: int) -> None:
        loop, client = self.loop, self.client
        total = GREETING_FRAMES + turns * (TONE_FRAMES + SILENCE_FRAMES)
        turn_ends: list[float] = []  # send time of each turn's last voiced frame
        turn_starts: list[float] = []  # send time of each turn's first voiced frame
        next_at = loop.time()
        for n in range(total):
            if self.disconnected or self.socket_closed.is_set():
                return
            if n % PING_EVERY == 0:
                if self.ping_seq is not None:
                    self.error("missing pong (none before the next ping)")
                await client.send("ping", position=position(n))
                self.ping_seq, self.ping_at = client.seq, loop.time()
            k = n - GREETING_FRAMES
            voiced = k >= 0 and k % (TONE_FRAMES + SILENCE_FRAMES) < TONE_FRAMES
            delay = next_at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            next_at += FRAME_MS / 1000
            try:
                await client.send_audio(TONE if voiced else SILENCE)
            except websockets.ConnectionClosed:
                return  # the reader reports the close
            if voiced and k % (TONE_FRAMES + SILENCE_FRAMES) == 0:
                turn_starts.append(loop.time())
            if voiced and k % (TONE_FRAMES + SILENCE_FRAMES) == TONE_FRAMES - 1:
                turn_ends.append(loop.time())
        delay = next_at - loop.time()  # the last frame's 200 ms
        if delay > 0:
            await asyncio.sleep(delay)
        self.res.first_done.set()
        if self.ping_seq is not None and loop.time() - self.ping_at > 5.0:
            self.error("missing pong (none within 5 s)")
        self.score(turn_starts, turn_ends, loop.time())

    def score(self, turn_starts: list[float], turn_ends: list[float], end: float) -> None:
        res = self.res
        bounds = [*turn_starts[1:], end]
        for t_end, t_next in zip(turn_ends, bounds, strict=True):
            res.expected_answers += 1
            times = [at for at, _ in self.client.audio_frames if t_end <= at < t_next]
            if not times:
                self.error("a turn without an answer")
                continue
            res.answers += 1
            res.answer_ms.append((times[0] - t_end) * 1000)
            res.frames_per_answer[len(times)] += 1
            # gaps between frames that are both on the 250 ms schedule: frame 1 (the lead) leaves as
            # soon as its audio is there, so the gap after it is shorter by design
            res.jitter_ms += [
                abs((times[i] - times[i - 1]) * 1000 - OUT_MS) for i in range(OUT_LEAD + 1, len(times))
            ]

    async def finish(self, read_task: asyncio.Task) -> None:
        client = self.client
        try:
            if not self.socket_closed.is_set():
                self.close_sent = True
                await client.send("close", {"reason": "disconnect" if self.disconnected else "end"})
                try:
                    async with asyncio.timeout(CLOSE_TIMEOUT_S):
                        await self.closed_msg.wait()
                except TimeoutError:
                    self.error("no closed within 10 s of close")
        except websockets.ConnectionClosed:
            pass
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await self.socket_closed.wait()
        except TimeoutError:
            self.error("socket still open 10 s after closed")
        read_task.cancel()
        await asyncio.gather(read_task, return_exceptions=True)


async def one(url: str, res: Results, sessions: int, turns: int, delay: float) -> None:
    await asyncio.sleep(delay)
    session_id = str(uuid.uuid4())
    try:
        async with websockets.connect(
            url, additional_headers=headers(session_id), max_size=2**20, open_timeout=OPEN_TIMEOUT_S
        ) as ws:
            await Session(ws, session_id, res, sessions).run(turns)
    except (OSError, websockets.InvalidHandshake, TimeoutError) as exc:
        res.errors[f"connect failed: {type(exc).__name__}: {str(exc)[:80]}"] += 1
        res.finished += 1
        if res.finished == sessions:
            res.all_opened.set()
    except websockets.ConnectionClosed as exc:
        rcvd = exc.rcvd
        res.errors[f"send failed, socket closed ({rcvd.code if rcvd else 'no close frame'})"] += 1


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds (/proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run(url: str, pid: int, sessions: int, turns: int, ramp: float) -> tuple[Results, float | None]:
    res = Results()
    rng = random.Random(11)
    tasks = [
        asyncio.create_task(one(url, res, sessions, turns, rng.uniform(0, ramp))) for _ in range(sessions)
    ]
    await asyncio.wait(
        [asyncio.create_task(res.all_opened.wait()), asyncio.gather(*tasks)],
        return_when=asyncio.FIRST_COMPLETED,
    )
    cpu_share = None
    if res.all_opened.is_set() and not res.first_done.is_set():
        cpu0, wall0 = cpu_seconds(pid), time.monotonic()
        done = asyncio.create_task(res.first_done.wait())
        await asyncio.wait([done, asyncio.gather(*tasks)], return_when=asyncio.FIRST_COMPLETED)
        wall = time.monotonic() - wall0
        if wall > 0.5:
            cpu_share = round((cpu_seconds(pid) - cpu0) / wall, 3)
    await asyncio.gather(*tasks)
    return res, cpu_share


def server_env(tmp: Path, kind: str, peer_port: int, sessions: int) -> dict[str, str]:
    base = f"http://127.0.0.1:{peer_port}"
    env = base_env(tmp, LOG_LEVEL="WARNING", CONTACTCENTER_MAX_SESSIONS=str(max(200, 2 * sessions)))
    for name in (
        "CONTACTCENTER_API_KEY",
        "CONTACTCENTER_CLIENT_SECRET",
        "REALTIME_PROVIDER",
        "CLOUD_REALTIME_VOICE_ENDPOINT",
        "CLOUD_REALTIME_VOICE_API_KEY",
        "CLOUD_REALTIME_VOICE_MODEL",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_MODEL",
        "USE_DEFAULT_CREDENTIAL",
    ):
        env.pop(name, None)
    if kind == "voicelive":
        env.update(
            REALTIME_PROVIDER="voicelive",
            CLOUD_REALTIME_VOICE_ENDPOINT=base,
            CLOUD_REALTIME_VOICE_API_KEY=KEY,
            CLOUD_REALTIME_VOICE_MODEL=MODEL,
        )
    else:
        env.update(
            REALTIME_PROVIDER="openai", OPENAI_BASE_URL=f"{base}/v1", OPENAI_API_KEY=KEY, OPENAI_MODEL=MODEL
        )
    return env


def stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=30.0, help="caller audio per session (whole turns)")
    parser.add_argument("--client", choices=("voicelive", "openai"), default="voicelive")
    parser.add_argument("--ramp", type=float, default=2.0, help="sessions start over this many seconds")
    parser.add_argument("--answer-chunks", type=int, default=10, help="peer: audio deltas per answer")
    parser.add_argument("--chunk-ms", type=int, default=150, help="peer: audio per delta")
    parser.add_argument("--interval", type=float, default=0.02, help="peer: seconds between deltas")
    parser.add_argument("--peer-nice", type=int, default=10, help="scheduling niceness of the peer process")
    args = parser.parse_args()
    turn_s = (TONE_FRAMES + SILENCE_FRAMES) * FRAME_MS / 1000
    turns = max(1, round((args.seconds - GREETING_FRAMES * FRAME_MS / 1000) / turn_s))
    peer = proc = None
    log_offset = 0
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        try:
            peer, peer_port = start_realtime_peer(
                KEY,
                chunks=args.answer_chunks,
                chunk_ms=args.chunk_ms,
                interval=args.interval,
                nice=args.peer_nice,
            )
            env = server_env(Path(tmp), args.client, peer_port, args.sessions)
            migrate(env)
            port = free_port()
            proc = start("uvicorn", port, env, log)
            wait_http(f"http://127.0.0.1:{port}/api/v1/ready", timeout=30, status=200)
            log_offset = log.stat().st_size
            res, cpu = asyncio.run(
                run(f"ws://127.0.0.1:{port}{PATH}", proc.pid, args.sessions, turns, args.ramp)
            )
        except BaseException:
            sys.stderr.write(log.read_text(errors="replace")[-4000:] if log.exists() else "")
            raise
        finally:
            stop(proc)
            stop(peer)
        problems = server_problems(log, log_offset)
    errors = [f"{what} (x{n})" for what, n in res.errors.most_common()] + problems
    opened_p99, jitter_p99 = pct(res.opened_ms, 99), pct(res.jitter_ms, 99)
    print(
        json.dumps(
            {
                "bench": "audiohook_bridge",
                "sessions": args.sessions,
                "seconds": args.seconds,
                "client": args.client,
                "opened_p50_ms": pct(res.opened_ms, 50),
                "opened_p99_ms": opened_p99,
                "pacing_jitter_p99_ms": jitter_p99,
                "answer_latency_p50_ms": pct(res.answer_ms, 50),
                "answer_latency_p99_ms": pct(res.answer_ms, 99),
                "answers": res.answers,
                "server_cpu": cpu,
                "errors": errors,
                "ok": not errors
                and res.opened_count == args.sessions
                and jitter_p99 is not None
                and jitter_p99 <= PACING_TARGET_MS
                and max(res.jitter_ms) < PACING_MAX_MS
                and opened_p99 is not None
                and opened_p99 <= OPENED_TARGET_MS,
                "opened": res.opened_count,
                "expected_answers": res.expected_answers,
                "turns_per_session": turns,
                "pacing_jitter_p50_ms": pct(res.jitter_ms, 50),
                "pacing_jitter_max_ms": round(max(res.jitter_ms), 2) if res.jitter_ms else None,
                "pacing_gaps": len(res.jitter_ms),
                "frames_per_answer": dict(sorted(res.frames_per_answer.items())),
                "answer_latency_max_ms": round(max(res.answer_ms), 2) if res.answer_ms else None,
                "pong_p99_ms": pct(res.pong_ms, 99),
                "barge_ins": res.barge_ins,
                "peer": f"separate process, nice {args.peer_nice}, answers of {args.answer_chunks} x "
                f"{args.chunk_ms} ms deltas {args.interval:g} s apart",
                "server": "uvicorn, 1 worker",
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
