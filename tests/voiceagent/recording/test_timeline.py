"""The recording's timeline: where each side's audio lands, a barge-in's cut, a duck, a gap."""

from __future__ import annotations

import numpy as np

from voiceagent.recording.timeline import StereoTimeline

RATE = 1000  # one sample a millisecond: positions read as times


def ones(n: int, value: int = 1000) -> np.ndarray:
    return np.full(n, value, np.int16)


def channels(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    both = np.frombuffer(data, np.int16)
    return both[0::2], both[1::2]


def test_caller_frames_lie_end_to_end_and_the_agent_from_when_it_arrived():
    line = StereoTimeline(RATE, t0=100.0)
    line.caller(ones(20), 100.02)
    line.caller(ones(20, 2000), 100.045)  # a little late (jitter): still right after the first
    line.agent(ones(100, 3000), 100.5)
    left, right = channels(line.take(101.0))
    assert len(left) == 1000
    assert (left[:20] == 1000).all() and (left[20:40] == 2000).all() and (left[40:] == 0).all()
    assert (right[:500] == 0).all() and (right[500:600] == 3000).all() and (right[600:] == 0).all()


def test_agent_audio_given_ahead_plays_after_the_line_before():
    line = StereoTimeline(RATE, t0=0.0)
    line.agent(ones(300, 1), 0.1)
    line.agent(ones(300, 2), 0.12)  # synthesis is faster than speech: queued behind the first
    _, right = channels(line.take(1.0))
    assert (right[100:400] == 1).all() and (right[400:700] == 2).all() and (right[700:] == 0).all()


def test_a_barge_in_cuts_what_was_not_heard():
    line = StereoTimeline(RATE, t0=0.0)
    line.agent(ones(1000), 0.0)
    line.cut(0.4)
    line.agent(ones(100, 7), 0.6)  # the next answer starts after the cut, at its own time
    _, right = channels(line.take(1.0))
    assert (right[:400] == 1000).all()
    assert (right[400:600] == 0).all() and (right[600:700] == 7).all() and (right[700:] == 0).all()


def test_a_duck_lowers_the_agent_until_restored_and_a_cut_ends_it():
    line = StereoTimeline(RATE, t0=0.0)
    line.agent(ones(1000, 10000), 0.0)
    line.gain(-20.0, 0.2)
    line.gain(0.0, 0.5)
    _, right = channels(line.take(1.0))
    assert (right[:200] == 10000).all() and (right[200:500] == 1000).all() and (right[500:] == 10000).all()
    line.gain(-20.0, 1.1)
    line.agent(ones(500, 10000), 1.0)
    line.cut(1.3)
    line.agent(ones(200, 10000), 1.5)
    _, right = channels(line.take(2.0))
    assert (right[:100] == 10000).all() and (right[100:300] == 1000).all()
    assert (right[300:500] == 0).all() and (right[500:700] == 10000).all()


def test_a_caller_gap_is_kept_as_silence():
    line = StereoTimeline(RATE, t0=0.0)
    line.caller(ones(100), 0.1)
    line.caller(ones(100, 5), 2.1)  # two seconds of nothing: a pause or lost frames
    left, _ = channels(line.take(None))
    assert len(left) == 2100
    assert (left[:100] == 1000).all() and (left[100:2000] == 0).all() and (left[2000:] == 5).all()


def test_takes_continue_where_the_last_ended():
    line = StereoTimeline(RATE, t0=0.0)
    line.caller(ones(300), 0.3)
    first = line.take(0.2)
    line.caller(ones(100, 9), 0.42)
    second = line.take(None)
    left = np.concatenate([channels(first)[0], channels(second)[0]])
    assert len(left) == 400 and (left[:300] == 1000).all() and (left[300:] == 9).all()


def test_audio_that_arrives_after_its_place_was_taken_lands_at_the_frontier():
    line = StereoTimeline(RATE, t0=0.0)
    line.take(1.0)
    line.agent(ones(100), 0.5)  # the writer lagged: it cannot go back into what was stored
    left, right = channels(line.take(None))
    assert len(right) == 100 and (right == 1000).all() and (left == 0).all()
