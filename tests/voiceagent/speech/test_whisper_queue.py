"""The recogniser's queue serves what a waiting caller needs first: finals, then pause
hypotheses, then interims, oldest first; a final makes its utterance's queued interims stale."""

from __future__ import annotations

from voiceagent.speech.whisper_queue import DecodeQueue, Kind, Request


def _queue() -> tuple[DecodeQueue, list[int]]:
    skipped: list[int] = []
    return DecodeQueue(on_skip=lambda r: skipped.append(r.id)), skipped


def _order(queue: DecodeQueue) -> list[int]:
    served = []
    while len(queue):
        served += [r.id for r in queue.take(1, timeout=0)]
    return served


def test_a_final_queued_after_interims_is_served_first_then_pauses_then_interims_oldest_first():
    queue, skipped = _queue()
    for n, utterance in enumerate((1, 2, 3), start=1):
        queue.put(Request(n, Kind.INTERIM, utterance, queued_at=float(n)))
    queue.put(Request(4, Kind.PAUSE, 5, queued_at=4.0))
    queue.put(Request(5, Kind.FINAL, 6, queued_at=5.0))
    queue.put(Request(6, Kind.FINAL, 7, queued_at=4.5))  # stopped speaking earlier: served first
    assert _order(queue) == [6, 5, 4, 1, 2, 3]
    assert skipped == [] and queue.deepest == 6


def test_a_final_skips_its_utterances_queued_interims_and_pauses_never_other_callers():
    queue, skipped = _queue()
    queue.put(Request(1, Kind.INTERIM, 7))
    queue.put(Request(2, Kind.INTERIM, 8))
    queue.put(Request(3, Kind.PAUSE, 7))
    assert queue.put(Request(4, Kind.FINAL, 7)) and skipped == [1, 3]
    assert _order(queue) == [4, 2]


def test_a_newer_interim_or_pause_replaces_the_queued_interims_and_older_pauses_of_its_utterance():
    queue, skipped = _queue()
    queue.put(Request(1, Kind.INTERIM, 7))
    queue.put(Request(2, Kind.INTERIM, 7))
    queue.put(Request(3, Kind.PAUSE, 7))
    assert skipped == [1, 2]
    queue.put(Request(8, Kind.PAUSE, 7))  # the caller spoke again and paused again
    assert skipped == [1, 2, 3] and _order(queue) == [8]
    queue.put(Request(4, Kind.INTERIM, 0))  # utterance 0 (none named): never stale
    queue.put(Request(5, Kind.INTERIM, 0))
    assert skipped == [1, 2, 3] and _order(queue) == [4, 5]


def test_a_queued_pause_promoted_to_final_goes_first_and_its_interims_go_stale():
    queue, skipped = _queue()
    queue.put(Request(1, Kind.FINAL, 3, queued_at=1.0))
    queue.put(Request(2, Kind.PAUSE, 4, queued_at=2.0))
    queue.put(Request(3, Kind.PAUSE, 5, queued_at=3.0))
    queue.put(Request(4, Kind.INTERIM, 6, queued_at=0.5))
    assert queue.promote(3) and not queue.promote(99)
    assert _order(queue) == [1, 3, 2, 4] and skipped == []
    queue.put(Request(5, Kind.INTERIM, 8))
    queue.put(Request(6, Kind.PAUSE, 9))
    queue.put(Request(7, Kind.INTERIM, 9))
    assert queue.promote(6) and skipped == [7]


def test_a_batch_takes_requests_of_one_urgency_and_one_window():
    queue, _ = _queue()
    queue.put(Request(1, Kind.INTERIM, 1, window=750, queued_at=0.0))
    queue.put(Request(2, Kind.FINAL, 2, window=750, queued_at=1.0))
    queue.put(Request(3, Kind.PAUSE, 3, window=1000, queued_at=2.0))
    queue.put(Request(4, Kind.PAUSE, 4, window=750, queued_at=3.0))
    queue.put(Request(5, Kind.FINAL, 5, window=750, queued_at=4.0))
    assert [r.id for r in queue.take(8, timeout=0)] == [2, 5, 4]  # not the interim, not the 10 s window
    assert [r.id for r in queue.take(8, timeout=0)] == [3]
    assert [r.id for r in queue.take(8, timeout=0)] == [1]
    queue.close()
    assert queue.take(8) == []
