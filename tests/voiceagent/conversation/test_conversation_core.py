"""The conversation core (what both pipelines share): what was heard, the session keywords, and
history written to the store in the order it was said."""

from __future__ import annotations

import asyncio

import pytest
from enginekit import Harness

from voiceagent.conversation.core import words_heard
from voiceagent.conversation.engine import Conversation
from voiceagent.conversation.session import InMemorySessionStore
from voiceagent.conversation.testing import EnergyVAD, InstantTTS, ScriptedChat, ScriptedSTT

WORDS = ["one", "two", "three", "four"]


@pytest.mark.parametrize(
    ("now", "slack", "heard"),
    [
        (0.5, 0.0, []),  # not begun
        (1.0, 0.0, []),  # just begun
        (1.5, 0.0, ["one", "two"]),  # half played: half the words
        (1.99, 0.0, ["one", "two", "three"]),
        (1.999, 0.01, WORDS),  # within the slack: all of it
        (2.0, 0.0, WORDS),
        (5.0, 0.0, WORDS),
    ],
)
def test_words_heard_is_the_played_share(now, slack, heard):
    assert words_heard(WORDS, 1.0, 2.0, now, slack) == heard


def test_a_line_of_no_duration_is_heard_whole_once_its_time_has_come():
    assert words_heard(WORDS, 1.0, 1.0, 1.0) == WORDS
    assert words_heard(WORDS, 1.0, 1.0, 0.5) == []


def _conversation(**session):
    return Conversation(
        "s1", stt=ScriptedSTT(), tts=InstantTTS(), chat=ScriptedChat(), vad=EnergyVAD(), **session
    )


def test_the_session_keywords_are_checked_as_before():
    with pytest.raises(TypeError):
        _conversation(directory=None, store=InMemorySessionStore())  # no scenario
    with pytest.raises(TypeError):
        _conversation(scenario="desk", directory=None, store=InMemorySessionStore(), bogus=1)


class SlowFirstWriteStore(InMemorySessionStore):
    """The first history write is slow (a store catching up): the later ones must not overtake it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    async def append_turn(self, state, turn):
        self.writes += 1
        if self.writes == 1:
            await asyncio.sleep(0.1)
        await super().append_turn(state, turn)


async def test_history_reaches_the_store_in_the_order_it_was_said():
    h = Harness(script=["First answer.", "Second answer."])
    h.conv.store = h.store = SlowFirstWriteStore()
    async with h:
        await h.idle()
        await h.conv.push_text("first question")
        await h.idle()
        await h.conv.push_text("second question")
        await h.idle()
    said = [(t.role, t.content) for t in h.conv.history]
    assert said[0] == ("assistant", "Hello, front desk.")
    assert ("user", "first question") in said and ("assistant", "Second answer.") in said
    assert [(t.role, t.content) for t in h.store.turns["s1"]] == said
