"""Pieces of bench/bench_turn_taking.py that decide its figures: when a case is over (its caller's
utterances all recognised) and what counts as the agent's silence in its answer."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench")]
import bench_turn_taking as bench  # noqa: E402
from turn_taking_session import CountingSTT, Played, Record  # noqa: E402


class _Stream:
    async def push(self, pcm16: bytes) -> None:
        pass

    async def finish(self) -> str:
        return "finished"

    async def finish_at_pause(self) -> str:
        return "the pause's words"

    async def cancel(self) -> None:
        pass


class _STT:
    async def open(self, language: str, on_interim) -> _Stream:
        return _Stream()


async def test_a_turn_ended_on_its_pauses_decode_closes_its_stream():
    """The engine takes a pending pause decode as the final (``finish_at_pause``, most turns on a
    slow machine): the case's count of open streams must drop, or no case is ever over (each ran
    to the 35 s cap and heard the agent's re-prompts)."""
    stt = CountingSTT(_STT())
    streams = [await stt.open("en-US", None) for _ in range(3)]
    assert stt.open_streams == 3
    assert await streams[0].finish_at_pause() == "the pause's words"
    assert await streams[1].finish() == "finished"
    await streams[2].cancel()
    assert stt.open_streams == 0 and len(stt.finish_s) == 2


def test_the_agents_silence_counts_only_its_answer_not_a_later_re_prompt():
    rec = Record()
    rec.audio = [
        Played(1.0, 2.0, 7, None),
        Played(2.5, 4.0, 7, None),  # resumed after 0.5 s: same response
        Played(9.0, 10.0, 8, None),  # a re-prompt, once the answer was over
    ]
    assert bench.agent_silence(rec, 1.5) == 0.5
