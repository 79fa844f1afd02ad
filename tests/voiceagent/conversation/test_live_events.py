"""What a live (realtime) assistant item records as heard when the caller cuts in.

Why: the service streams an item's audio and its transcript as separate deltas, and the transcript
may trail the audio (CI once: the barge-in came before the item's first transcript delta, and the
turn the caller had heard was missing from the history)."""

from __future__ import annotations

from voiceagent.conversation.live_events import AssistantItem

SECOND = 16000 * 2  # bytes of PCM16 at 16 kHz


def item(text: str | None, seconds: float = 2.0) -> AssistantItem:
    it = AssistantItem(id="i", rid=1, agent="a", start=10.0, audio_bytes=int(seconds * SECOND))
    if text is not None:
        it.parts.append(text)
    return it


def test_a_cut_before_any_transcript_arrived_keeps_a_turn():
    assert item(None).heard(10.5) == "…"


def test_a_cut_before_the_first_whole_word_keeps_a_turn():
    assert item("one two three four").heard(10.1) == "…"


def test_a_cut_mid_answer_keeps_the_words_heard():
    assert item("one two three four").heard(11.0) == "one two …"


def test_nothing_played_is_no_turn():
    assert item("one two").heard(9.0) == ""
    assert AssistantItem(id="i", rid=1, agent="a").heard(10.0) == ""


def test_played_to_the_end_is_the_whole_transcript():
    assert item("one two").heard(12.5) == "one two"
    assert item("one two").heard(None) == "one two"
