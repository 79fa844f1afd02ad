"""The echo path: the lag and loss of a line's echo, learned from levels, release a caller the level
gate hides (voiceagent.conversation.echo_path)."""

from __future__ import annotations

import random

import pytest

from voiceagent.conversation.echo import EchoReference
from voiceagent.conversation.echo_path import ESTIMATE_EVERY

T0 = 100.0
FRAME = 0.02
GATE_DB = 10.0


def speech_envelope(frames: int, rnd: random.Random) -> list[float]:
    """Agent levels (dBFS per 20 ms): syllables of 5-12 frames at -22..-9, gaps of silence."""
    out: list[float] = []
    while len(out) < frames:
        out += [rnd.uniform(-22.0, -9.0) for _ in range(rnd.randint(5, 12))]
        out += [-100.0] * rnd.randint(1, 6)
    return out[:frames]


def playing(agent: list[float]) -> EchoReference:
    """An echo reference with ``agent``'s levels queued on the playback clock from T0."""
    ref = EchoReference()
    for i, level in enumerate(agent):
        ref._queued.append((T0 + i * FRAME, level))
    return ref


def line_with_echo(
    lag: int, loss_db: float, frames: int = 400, band: bool = False
) -> tuple[EchoReference, list[float]]:
    """An echo reference that heard ``frames`` of the agent come back ``lag`` frames later,
    ``loss_db`` down (over line hiss at -62 dBFS), nobody else talking. ``band``: through a phone
    band, which loses 5-20 dB more of a third of the frames (the fricatives' energy above 3.4 kHz)."""
    rnd = random.Random(7)
    agent = speech_envelope(frames + 200, rnd)
    ref = playing(agent)
    for i in range(frames):
        echo = agent[i - lag] - loss_db + rnd.gauss(0.0, 1.0) if i >= lag else -100.0
        if band and rnd.random() < 1 / 3:
            echo -= rnd.uniform(5.0, 20.0)
        ref.observe(max(-62.0, echo), T0 + i * FRAME)
    return ref, agent


@pytest.mark.parametrize("band", [False, True], ids=["full band", "phone band"])
def test_a_steady_echo_is_learned_as_a_lag_and_a_loss(band):
    ref, _ = line_with_echo(lag=6, loss_db=18.0, band=band)
    assert ref.path.lag == 6
    assert 15.0 <= ref.path.loss_db <= 18.0  # where its loudest frames sit: errs on the echo's side


def test_a_caller_under_the_level_gate_is_heard_once_the_echo_path_is_known():
    ref, agent = line_with_echo(lag=6, loss_db=18.0)
    # a moment (after the learning) when the agent was loud within the last second but quiet 6
    # frames ago: its echo now is far below a caller at -23 dBFS, the level gate hides the caller
    i = next(
        i for i in range(420, 590) if max(agent[i - 50 : i]) >= -13.0 and max(agent[i - 8 : i - 3]) <= -18.0
    )
    now = T0 + i * FRAME
    assert ref.level(now) - ref.gate_db(GATE_DB) > -23.0  # the caller is below the level gate...
    assert not ref.is_echo(-23.0, now, GATE_DB)  # ...and heard: 8+ dB over the echo expected now
    echo = max(agent[i - 6], -62.0) - 18.0
    assert ref.is_echo(echo, now, GATE_DB)  # the echo itself stays echo

    blind = playing(agent)  # the same agent, no echo path learned: the level gate alone
    blind.level(now)
    assert blind.is_echo(-23.0, now, GATE_DB)


def test_noise_that_does_not_follow_the_agent_is_no_echo_path():
    rnd = random.Random(3)
    ref = playing(speech_envelope(600, rnd))
    for i in range(400):  # a fan or a room: its own level, whatever the agent says
        ref.observe(rnd.uniform(-45.0, -30.0), T0 + i * FRAME)
    assert ref.path.lag is None
    assert ref.path.spread_db is not None
    assert ref.path._every > ESTIMATE_EVERY  # it looks less and less often (each look ~0.2 ms)
    now = T0 + 450 * FRAME
    level_gate = ref.level(now) - ref.gate_db(GATE_DB)
    assert ref.is_echo(level_gate - 1.0, now, GATE_DB)  # the level gate decides, as before


def test_a_steady_hiss_follows_every_lag_and_is_no_echo_path():
    rnd = random.Random(5)
    ref = playing(speech_envelope(600, rnd))
    for i in range(45):  # the first second of a line without echo: hiss, before any return loss is known
        ref.observe(-62.0 + rnd.uniform(-0.3, 0.3), T0 + i * FRAME)
        assert ref.path.lag is None


def test_a_line_with_hardly_any_echo_needs_no_path():
    ref, _ = line_with_echo(lag=4, loss_db=50.0)
    assert ref.return_loss_db is not None and ref.return_loss_db >= 40.0
    assert ref.path.lag is None


def test_a_microphone_that_never_moves_follows_no_agent():
    """One hiss frame over and over against an agent at one level (bench_capacity's callers and
    its constant-level synthesis): every lag is as 'steady' as any other, spread 0. Not a path:
    an echo of speech moves tens of dB."""
    ref = playing([-30.0] * 600)  # 29 dB over the hiss: under NO_ECHO_LOSS_DB, so it is looked for
    for i in range(400):
        ref.observe(-60.7, T0 + i * FRAME)
    assert ref.path.lag is None
