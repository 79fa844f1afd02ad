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
from collections.abc import Iterator
from dataclasses import dataclass, field

from harness import noise_frame
from websockets.client import ClientProtocol
from websockets.exceptions import InvalidHandshake
from websockets.extensions.permessage_deflate import enable_client_permessage_deflate
from websockets.frames import Opcode
from websockets.http11 import Response
from websockets.protocol import State
from websockets.uri import parse_uri

FRAME_MS, RATE = 20, 16000
FRAME_BYTES = RATE * FRAME_MS // 1000 * 2
NOISE = noise_frame(RATE, FRAME_MS)
GREETING_TIMEOUT_S = 15.0
CONNECT_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 5.0
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
    lag_ms: list[float] = field(default_factory=list)  # a sample of how late frames were sent
    greetings: list[dict] = field(default_factory=list)  # per greeted caller: `start` sent -> first audio

    def merge(self, other: Results) -> None:
        self.turns += other.turns
        self.errors.update(other.errors)
        self.live += other.live
        self.lag_ms += other.lag_ms
        self.greetings += other.greetings

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

    def turn_over(self) -> None:
        """The caller has sent the frame that ends its turn: audio from now on is the answer."""
        self.speaking = False

    def answered(self, now: float) -> bool:
        """The answer has arrived and finished playing."""
        return (
            self.first_audio is not None
            and now - self.last_audio > 0.3
            and now > self.first_audio + self.audio_s + 0.2
        )


class _Caller(asyncio.Protocol):
    """One caller: a WebSocket client on websockets' sans-I/O protocol, its frames sent from a
    timer callback (``loop.call_at``) and its script a generator (:meth:`_script`) that yields the
    next 20 ms frame. Why not ``websockets.connect`` and a coroutine sleeping per frame: at 100
    callers a process that is 5000 sends and sleeps a second, and the asyncio client's per-send
    locks, futures and drains made the load generator use ~half the CPU the server did on the same
    2-core machine, stealing it from the server it measures. Each caller keeps its own phase (its
    own 20 ms schedule from when it connected), as independent browsers do."""

    def __init__(self, plan: Plan, index: int, res: Results, done: asyncio.Future) -> None:
        self.plan, self.index, self.res, self.done = plan, index, res, done
        self.rng = random.Random(index)
        self.listener = _Listener()
        self.protocol = ClientProtocol(
            parse_uri(plan.url), max_size=2**22, extensions=enable_client_permessage_deflate(None)
        )
        self.transport: asyncio.Transport | None = None
        self.opened: asyncio.Future = done.get_loop().create_future()
        self.connect_at = 0.0  # time.monotonic() when the connection was asked for
        self.lost: asyncio.Future = done.get_loop().create_future()  # the socket is closed
        self.frames: Iterator[bytes] | None = None
        self.next_at = 0.0
        self.sent_at = 0.0  # time.monotonic() of the last frame written
        self.end_of_turn: float | None = None  # when the frame that ended the caller's turn was written
        self.ending = False  # the next frame written ends the caller's turn
        self.ticks = 0
        self.timer: asyncio.TimerHandle | None = None
        self.partial: list[bytes] = []  # a fragmented text message so far
        self.closing = False

    # --- the socket -----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.protocol.send_request(self.protocol.connect())
        self._flush()

    def data_received(self, data: bytes) -> None:
        self.protocol.receive_data(data)
        for event in self.protocol.events_received():
            if isinstance(event, Response):
                if not self.opened.done():
                    if self.protocol.handshake_exc is not None:
                        self.opened.set_exception(self.protocol.handshake_exc)
                    else:
                        self.opened.set_result(None)
            elif event.opcode in (Opcode.TEXT, Opcode.CONT):
                self.partial.append(event.data)
                if event.fin:
                    text, self.partial = b"".join(self.partial), []
                    self.listener.feed(json.loads(text))
        self._flush()  # pongs, the close handshake
        if self.protocol.state is State.CLOSED or self.protocol.close_rcvd is not None:
            self._closed_by_peer()

    def eof_received(self) -> bool | None:
        self.protocol.receive_eof()
        self._flush()
        self._closed_by_peer()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        if not self.opened.done():
            self.opened.set_exception(exc or ConnectionError("closed during the handshake"))
        self._closed_by_peer()

    def _flush(self) -> None:
        assert self.transport is not None
        for data in self.protocol.data_to_send():
            if data:
                self.transport.write(data)
            elif self.transport.can_write_eof():
                self.transport.write_eof()

    def _closed_by_peer(self) -> None:
        if self.closing or self.done.done():
            return
        rcvd = self.protocol.close_rcvd
        key = f"closed: {rcvd.code} {rcvd.reason}" if rcvd else "closed without a close frame"
        self.res.errors[key] += 1
        self._finish()

    def _finish(self) -> None:
        self.closing = True
        if self.timer is not None:
            self.timer.cancel()
        if not self.done.done():
            self.done.set_result(None)

    def hang_up(self) -> None:
        """Close as a client does (1000), then drop the socket if the server does not (2 s)."""
        if self.transport is None or self.transport.is_closing():
            return
        if self.protocol.state is State.OPEN:
            self.protocol.send_close(1000)
            self._flush()
        self.done.get_loop().call_later(CLOSE_TIMEOUT_S, self.transport.close)

    # --- sending --------------------------------------------------------------------------------
    def start_sending(self) -> None:
        for message in (
            {"type": "config", "payload": {"scenario": "default", "sample_rate": RATE}},
            {"type": "control", "payload": {"action": "start"}},
        ):
            self.protocol.send_text(json.dumps(message).encode())
        self._flush()
        self.frames = self._script()
        self.next_at = time.monotonic()
        self._tick()

    def _tick(self) -> None:
        if self.closing or self.frames is None:
            return
        if self.protocol.state is not State.OPEN:
            self._closed_by_peer()
            return
        frame = next(self.frames, None)
        if frame is None:  # the script is over
            self._finish()
            return
        self.protocol.send_binary(frame)
        self._flush()
        now = self.sent_at = time.monotonic()
        if self.ending:  # the turn ends now, not at the next tick: a fast answer may come within 20 ms
            self.ending = False
            self.end_of_turn = now
            self.listener.turn_over()
        lag = now - self.next_at
        self.ticks += 1
        if self.ticks % 50 == 0:  # a sample (1 s apart); not from rng, which draws the pauses
            self.res.lag_ms.append(round(lag * 1000, 2))
        self.next_at += FRAME_MS / 1000
        if lag > MAX_LAG_S:  # this process was starved: go on from now, no burst
            self.next_at = now + FRAME_MS / 1000
        self.timer = self.done.get_loop().call_later(max(0.0, self.next_at - now), self._tick)

    def _script(self) -> Iterator[bytes]:
        """What the caller says, one 20 ms frame per ``next``; results recorded as it goes."""
        plan, res, listener = self.plan, self.res, self.listener
        began = time.monotonic()
        while not listener.answered(time.monotonic()) and time.monotonic() - began < GREETING_TIMEOUT_S:
            yield NOISE  # the greeting plays
        if listener.first_audio is None:
            res.errors["no greeting audio"] += 1
        else:  # what a caller hears of a burst: the wait from `control start` to the greeting
            ms = round((listener.first_audio - began) * 1000, 2)
            connect_ms = round((began - self.connect_at) * 1000, 2)
            res.greetings.append(
                {"caller": self.index, "start_at": began, "ms": ms, "connect_ms": connect_ms}
            )
        greeted = time.monotonic()
        for t in range(plan.turns):
            said, pcm = plan.utterances[(self.index + t) % len(plan.utterances)]
            for _ in range(int(self.rng.uniform(*plan.pause_s) * 1000) // FRAME_MS):
                yield NOISE  # callers do not all speak at once (nor in step)
            listener.reset(True)
            for i in range(0, len(pcm), FRAME_BYTES):
                yield pcm[i : i + FRAME_BYTES].ljust(FRAME_BYTES, b"\0")
            silence = max(1, plan.silence_ms // FRAME_MS)
            for i in range(silence):
                self.ending = i == silence - 1  # _tick ends the turn as it writes this frame
                yield NOISE
            assert self.end_of_turn is not None
            end, self.end_of_turn = self.end_of_turn, None
            if listener.late_audio:
                res.errors["answer audio while the caller spoke"] += 1
            while not listener.answered(time.monotonic()) and time.monotonic() - end < plan.turn_timeout_s:
                if listener.errors and time.monotonic() - end > 1.0:
                    break
                yield NOISE
            res.turns.append(_turn(self.index, t, said, listener, end))
            for code in listener.errors:
                res.errors[f"error message {code}"] += 1
            if listener.ended:
                res.errors["conversation ended by the agent"] += 1
                break
        res.live.append((greeted, time.monotonic()))


def _turn(index: int, t: int, said: str, listener: _Listener, end: float) -> dict:
    final = listener.final
    return {
        "caller": index,
        "turn": t,
        "said": said,
        "heard": final[1] if final else None,
        "final_ms": round((final[0] - end) * 1000, 2) if final else None,
        "audio_ms": round((listener.first_audio - end) * 1000, 2) if listener.first_audio else None,
        "errors": listener.errors,
        "late_audio": listener.late_audio,  # audio frames received while the caller still spoke
        "end_at": end,  # time.monotonic, comparable with the server's stamps
        "audio_at": listener.first_audio,
    }


async def caller(plan: Plan, index: int, res: Results) -> None:
    """One caller's whole conversation: connect (after its share of the ramp), speak its turns,
    hang up. Failures are counted in ``res.errors``, never raised."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    me = _Caller(plan, index, res, done)
    await asyncio.sleep(me.rng.uniform(0, plan.spread_s))
    uri = parse_uri(plan.url)
    me.connect_at = time.monotonic()
    try:
        await asyncio.wait_for(loop.create_connection(lambda: me, uri.host, uri.port), CONNECT_TIMEOUT_S)
        await asyncio.wait_for(me.opened, CONNECT_TIMEOUT_S)
    except (OSError, InvalidHandshake, TimeoutError) as exc:
        res.errors[f"connect failed: {type(exc).__name__}: {str(exc)[:80]}"] += 1
        if me.transport is not None:
            me.transport.close()
        return
    me.start_sending()
    try:
        await done
    finally:
        me.closing = True
        me.hang_up()
    with contextlib.suppress(TimeoutError):  # the close handshake, as a browser leaving does
        await asyncio.wait_for(asyncio.shield(me.lost), CLOSE_TIMEOUT_S)


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
