"""Caller frames are judged by the echo gate at the time they were captured, not when they reached
it (voiceagent.conversation.capture_clock): a jittery transport or a loaded loop must not turn the
agent's own echo into a caller."""

from __future__ import annotations

import math
import random

import pytest
from enginekit import RATE, SILENCE, Harness
from test_echo_path import FRAME, GATE_DB, T0, playing, speech_envelope

from voiceagent.conversation.capture_clock import RESTART_S, WINDOW, CaptureClock
from voiceagent.conversation.echo import EchoReference


def bunched(captured: float, rnd: random.Random, tick: float = 0.08) -> float:
    """When a frame captured at ``captured`` is read by a loop that reads its socket every ``tick``
    and stalls up to 0.2 s more now and then (a loaded two-core machine, a Wi-Fi hop)."""
    stall = rnd.uniform(0.0, 0.2) if rnd.random() < 0.03 else 0.0
    return math.ceil((captured + 0.004) / tick) * tick + stall


def test_bunched_frames_get_the_senders_clock_back():
    clock = CaptureClock()
    rnd = random.Random(1)
    stamps, last = [], 0.0
    for i in range(300):
        arrival = last = max(last, bunched(T0 + i * FRAME, rnd))
        stamp = clock.stamp(arrival)
        assert stamp <= arrival + 1e-9  # never later than it came
        stamps.append(stamp)
    steps = [b - a for a, b in zip(stamps[WINDOW:], stamps[WINDOW + 1 :], strict=False)]
    assert min(steps) >= 0.0  # never backwards
    # once the window holds an undelayed frame, one frame apart (a stall's shadow aside)
    assert sum(abs(s - FRAME) < 1e-6 for s in steps) >= 0.9 * len(steps)
    assert all(abs(s - (T0 + i * FRAME)) <= 0.08 for i, s in enumerate(stamps) if i >= WINDOW)


def test_a_stream_that_stops_and_resumes_starts_its_clock_again():
    clock = CaptureClock()
    for i in range(60):
        clock.stamp(T0 + i * FRAME)
    resumed = T0 + 60 * FRAME + 5.0  # push-to-talk released for 5 s, then pressed again
    assert clock.stamp(resumed) == resumed  # not placed 5 s in the past by the old anchor
    assert clock.stamp(resumed + FRAME) == resumed + FRAME
    late = resumed + 2 * FRAME + RESTART_S / 2  # a delay shorter than a restart keeps the clock
    assert clock.stamp(late) == pytest.approx(resumed + 2 * FRAME)


def released_echo_frames(stamp_by_capture: bool, seed: int) -> int:
    """The agent's echo (6 frames late, 14 dB down) read through a bunching loop: how many of its
    audible frames the echo gate takes for the caller."""
    rnd = random.Random(seed)
    agent = speech_envelope(1200, rnd)
    ref = playing(agent)
    clock = CaptureClock()
    released, last = 0, 0.0
    for i in range(900):
        arrival = last = max(last, bunched(T0 + i * FRAME, rnd))
        at = clock.stamp(arrival) if stamp_by_capture else arrival
        echo = max(-62.0, agent[i - 6] - 14.0 + rnd.gauss(0.0, 1.0)) if i >= 6 else -62.0
        if ref.playing(at):
            ref.observe(echo, at)
            if i > 150 and echo > -40.0 and not ref.is_echo(echo, at, GATE_DB):
                released += 1
    return released


def test_the_echo_through_a_bunching_loop_stays_echo_on_the_capture_clock():
    # stamped on arrival, a bunch moves an echo frame of a loud syllable over the quiet gap after
    # it: louder than the echo expected there, it passed for the caller (the agent stopped itself)
    assert sum(released_echo_frames(False, seed) for seed in range(5)) > 10
    assert [released_echo_frames(True, seed) for seed in range(5)] == [0] * 5


class Recording(EchoReference):
    """The echo gate, noting the time each caller frame is judged at."""

    def __init__(self) -> None:
        super().__init__()
        self.judged_at: list[float] = []

    def playing(self, now: float) -> bool:
        self.judged_at.append(now)
        return super().playing(now)


async def test_the_conversation_judges_each_frame_at_its_capture_time():
    """Frames read three at a time by a slow loop reach the echo gate one frame apart."""
    async with Harness() as h:
        await h.idle()
        gate = h.conv._echo = Recording()
        base = h.conv.loop_time()
        now = [base]
        h.conv.loop_time = lambda: now[0]
        for i in range(30):
            now[0] = base + 0.06 * (i // 3)  # 3 frames at each 60 ms read
            h.conv.push_audio(SILENCE, RATE)
        del h.conv.loop_time
    steps = [round(b - a, 6) for a, b in zip(gate.judged_at, gate.judged_at[1:], strict=False)]
    # from the first bunch's last frame on (the least delayed yet): one frame apart
    assert len(gate.judged_at) == 30 and steps[2:] == [FRAME] * 27
