"""The pieces of bench/bench_vs_pipecat.py that need no Pipecat (CI never installs it): the clip,
the caller's turn bookkeeping against a wire-level peer, the arguments and the verdicts. No timing
thresholds: the bench reports times, these check that what it counts is what happened."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench")]
import bench_vs_pipecat as bench  # noqa: E402
import side_by_side_caller as caller  # noqa: E402

SPEECH = (np.sin(np.arange(caller.RATE // 5) / 3) * 8000).astype("<i2").tobytes()  # 200 ms, loud


def dbfs(frame: bytes) -> float:
    samples = np.frombuffer(frame, "<i2").astype(float)
    return 20 * np.log10(np.sqrt(np.mean(samples**2)) / 32768)


def test_the_clip_marks_each_turns_speech_and_keeps_the_noise_at_its_level():
    clip = caller.make_clip(SPEECH, turns=3, lead_s=0.4, tail_s=1.0, noise_dbfs=-40)
    assert all(len(f) == caller.FRAME_BYTES for f in clip.frames)
    assert len(clip.speech_starts) == len(clip.speech_ends) == 3
    assert clip.speech_starts[0] == 20  # 400 ms of lead
    for start, end in zip(clip.speech_starts, clip.speech_ends, strict=True):
        assert end - start + 1 == 10  # 200 ms of speech, 20 ms frames
        assert dbfs(clip.frames[end]) > -30 and dbfs(clip.frames[end + 1]) == pytest.approx(-40, abs=1)
    assert clip.seconds == pytest.approx(0.4 + 3 * 1.2)


class EnergyPeer:
    """A server speaking the Pipecat peer's wire format: raw PCM16 in, and after ``silence``
    quiet frames following speech, one binary frame back ("agent audio"); ``during_speech`` makes
    it answer at once instead, as a VAD that cuts the caller off would."""

    def __init__(
        self, silence: int = 5, during_speech: bool = False, delay_s: float = 0.0, frames: int = 1
    ) -> None:
        self.silence, self.during_speech, self.delay_s = silence, during_speech, delay_s
        self.frames = frames  # of one answer, 20 ms apart
        self.port = 0
        self.ready = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop: asyncio.Event | None = None
        self.tasks: set[asyncio.Task] = set()

    async def answer(self, ws) -> None:
        await asyncio.sleep(self.delay_s)
        with contextlib.suppress(ConnectionClosed):
            for _ in range(self.frames):
                await ws.send(b"\0" * 960)
                await asyncio.sleep(0.02)

    async def handler(self, ws) -> None:
        spoke, quiet = 0, 0
        async for frame in ws:
            loud = dbfs(frame) > -30
            spoke, quiet = (spoke + 1, 0) if loud else (spoke, quiet + 1)
            if self.during_speech and spoke == 8 and not quiet:  # 160 ms into the speech
                await ws.send(b"\0" * 960)
            if spoke and quiet == self.silence:
                if not self.during_speech:
                    self.tasks.add(asyncio.create_task(self.answer(ws)))
                spoke = 0

    def run(self) -> None:
        async def main() -> None:
            self.loop, self.stop = asyncio.get_running_loop(), asyncio.Event()
            async with serve(self.handler, "127.0.0.1", 0) as server:
                self.port = server.sockets[0].getsockname()[1]
                self.ready.set()
                await self.stop.wait()

        asyncio.run(main())

    def __enter__(self) -> str:
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        self.ready.wait(10)
        return f"ws://127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(10)


def test_the_caller_times_every_answered_turn_of_every_conversation():
    clip = caller.make_clip(SPEECH, turns=2, lead_s=0.2, tail_s=0.5)
    with EnergyPeer() as url:
        res = caller.run(url, "pipecat", clip, conversations=3, spread_s=0.1)
    assert len(res.end_of_turn_ms) == 6 and res.early == 0 and res.missing == 0, res
    assert all(ms > 0 for ms in res.end_of_turn_ms)
    assert res.session_s == pytest.approx(3 * clip.seconds, rel=0.3)
    assert not res.errors


def test_an_answer_while_the_caller_speaks_is_early_and_not_timed():
    clip = caller.make_clip(SPEECH, turns=2, lead_s=0.2, tail_s=0.5)
    with EnergyPeer(during_speech=True) as url:
        res = caller.run(url, "pipecat", clip, conversations=1, spread_s=0.0)
    assert res.early == 2 and res.end_of_turn_ms == [] and res.missing == 0, res


def test_a_late_answer_is_timed_as_its_turns_not_the_next_ones_early_answer():
    """A server falling behind answers turn 1 while the caller says turn 2: that is turn 1's end of
    turn (long), and turn 2 is neither early nor missing."""
    clip = caller.make_clip(SPEECH, turns=3, lead_s=0.2, tail_s=0.3)
    with EnergyPeer(delay_s=0.3) as url:  # 400 ms after the end: 100 ms into the next turn's speech
        res = caller.run(url, "pipecat", clip, conversations=1, spread_s=0.0)
    assert res.early == 0 and len(res.end_of_turn_ms) + res.missing == 3, res
    assert len(res.end_of_turn_ms) >= 2 and min(res.end_of_turn_ms) > 300, res


def test_an_answer_still_playing_when_the_caller_speaks_again_is_not_an_early_answer():
    clip = caller.make_clip(SPEECH * 2, turns=3, lead_s=0.2, tail_s=0.3)
    with EnergyPeer(frames=15) as url:  # 300 ms of answer from 100 ms after the end: 100 ms past the tail
        res = caller.run(url, "pipecat", clip, conversations=1, spread_s=0.0)
    assert res.early == 0 and len(res.end_of_turn_ms) == 3, res


def test_a_turn_never_answered_is_missing():
    clip = caller.make_clip(SPEECH, turns=2, lead_s=0.2, tail_s=0.3)
    with EnergyPeer(silence=10_000) as url:
        res = caller.run(url, "pipecat", clip, conversations=1, spread_s=0.0)
    assert res.missing == 2 and res.end_of_turn_ms == [], res


def test_arguments_and_verdicts():
    args = bench.parse_args(["--conversations", "10,50", "--rounds", "3"])
    assert args.pipecat_no_rtvi is False  # run() reads it: Pipecat's default, RTVI on
    assert bench.parse_args(["--pipecat-no-rtvi"]).pipecat_no_rtvi is True
    assert args.turn_model == "none"  # like for like: the silence alone on both sides
    assert args.conversations == [10, 50] and args.rounds == 3 and args.silence_ms == 500
    assert args.venv.endswith("var/bench-venvs/pipecat")
    with pytest.raises(SystemExit):
        bench.parse_args(["--conversations", "0"])
    run = {"cpu_s": 1.0, "session_s": 100.0, "end_of_turn_ms": [500.0, 510.0], "early": 0, "missing": 0}
    run |= {
        "errors": {},
        "server_cores": 0.3,
        "caller_cpu_cores": 0.1,
        "caller_send_lag_ms_p99": 0.0,
        "cpu_ms_per_session_s": 10.0,
    }
    ours = bench.summarise([run, run])
    theirs = bench.summarise([{**run, "cpu_s": 6.0, "end_of_turn_ms": [520.0, 530.0]}])
    assert ours["cpu_ms_per_session_s"] == 10.0 and theirs["cpu_ms_per_session_s"] == 60.0
    verdict = bench.compare(ours, theirs)
    assert verdict["cpu_ratio_pipecat_over_ours"] == 6.0 and verdict["cpu_target_met"]
    assert verdict["end_of_turn_p50_ours_minus_pipecat_ms"] < 0 and verdict["end_of_turn_target_met"]
    assert not bench.saturated(ours, turns=4, silence_ms=500)
    assert bench.saturated(ours, turns=10, silence_ms=500)  # 4 of 10 turns timed: fell behind
    assert bench.saturated(ours, turns=4, silence_ms=200)  # answers at 2.5x the silence
    assert bench.PIPECAT_REQUIREMENTS[0] == f"pipecat-ai[silero,websocket]=={bench.PIPECAT_VERSION}"


def test_pipecat_is_never_a_dependency_of_the_service():
    """Pipecat the framework is never installed for the service: only its wheel's Smart Turn model
    file, without its dependencies (requirements-nodeps.txt), and no code of ours imports it."""
    for req in ROOT.glob("requirements*.txt"):
        if req.name != "requirements-nodeps.txt":
            assert "pipecat" not in req.read_text().lower(), req
    for source in [
        *ROOT.glob("voiceagent/**/*.py"),
        *ROOT.glob("*_app/**/*.py"),
        *ROOT.glob("calls/**/*.py"),
    ]:
        assert not re.search(r"^\s*(import|from) pipecat\b", source.read_text(), re.M), source
