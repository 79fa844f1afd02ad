"""A person takes a conversation over, speaks through it and hands it back (issue 32, point 1), on
the cascade engine with instant providers: the agent stops at once and stays silent, the caller's
words are still stored, the person's lines are spoken in the agent's voice and kept as theirs,
and the handback answers the caller with the person's words in the model's context."""

from __future__ import annotations

import asyncio

from enginekit import Harness

from voiceagent.conversation.session import PERSON
from voiceagent.conversation.testing import InstantTTS
from voiceagent.conversation.turn_taking import TurnTaking

QUIET = TurnTaking(reprompt_after_s=0.2, max_reprompts=1, reprompt="Still there?", goodbye="Bye.")


def finals(h: Harness) -> list[str]:
    return [e.text for e in h.of("AgentResponse") if e.final]


def takeovers(h: Harness) -> list[tuple[bool, str]]:
    return [(e.active, e.by) for e in h.of("Takeover")]


async def test_takeover_mid_answer_stops_the_agent_at_once_and_keeps_what_was_heard():
    slow = InstantTTS(ms_per_word=200, chunk_ms=20)  # the answer plays for seconds
    async with Harness(script=["One two three four five six seven eight nine ten."], tts=slow) as h:
        await h.conv.push_text("tell me a story")
        await h.until(lambda h: len(h.of("Audio")) > 3 + len(finals(h)))  # the answer is playing
        result = h.conv.take_over("alice")
        assert result.status == 200 and result.body == {"taken_over": True, "by": "alice"}
        assert h.conv.taken_over_by == "alice"
        await h.until(lambda h: takeovers(h) == [(True, "alice")])
        assert h.of("StopAudio"), "the agent's audio was not stopped"
        await asyncio.sleep(0.05)
        said = [t for t in h.conv.history if t.role == "assistant"]
        assert said[-1].heard == "cut" and said[-1].content.endswith("…")
        system = [t for t in h.conv.history if t.role == "system"]
        assert system[-1].speaker == PERSON and "alice took over" in system[-1].content


async def test_while_taken_over_the_caller_is_stored_not_answered_and_never_reprompted():
    async with Harness(turn_taking=lambda: QUIET) as h:
        await h.idle()
        assert h.conv.take_over("alice").ok
        answered = len(h.chat.requests)
        await h.conv.push_text("hello is anyone there")
        h.conv.push_dtmf("4")
        h.conv.push_dtmf("#")
        await asyncio.sleep(0.6)  # three re-prompt periods
        assert len(h.chat.requests) == answered, "the agent answered while a person had the call"
        assert "Still there?" not in finals(h) and not h.conv.closed
        users = [t.content for t in h.conv.history if t.role == "user"]
        assert users[-2:] == ["hello is anyone there", "Keypad entry: 4"]
        transcripts = [e.text for e in h.of("Transcript") if e.final]
        assert "hello is anyone there" in transcripts  # still shown to dashboards and the client


async def test_the_persons_line_is_spoken_in_the_agents_voice_and_kept_as_theirs():
    async with Harness() as h:
        await h.idle()
        assert h.conv.say("hi").status == 409  # not taken over
        h.conv.take_over("alice")
        result = h.conv.say("This is Alice from the bank, I can help.")
        assert result.status == 200 and result.body["by"] == "alice"
        await h.until(lambda h: any(e.by == "alice" for e in h.of("AgentResponse")))
        line = [e for e in h.of("AgentResponse") if e.by == "alice"][0]
        assert line.text == "This is Alice from the bank, I can help." and line.agent == "front"
        await h.idle()
        audio_of_line = [e for e in h.of("Audio") if e.response_id == line.response_id]
        assert audio_of_line, "the person's line was not spoken"
        person = [t for t in h.conv.history if t.role == "assistant" and t.speaker == PERSON]
        assert [(t.content, t.agent, t.heard) for t in person] == [
            ("This is Alice from the bank, I can help.", "alice", "played")
        ]
        stored = h.store.turns["s1"]
        assert any(t.speaker == PERSON and t.content.startswith("This is Alice") for t in stored)
        metrics = h.of("TurnMetrics")
        assert all(m.agent != "alice" for m in metrics)  # no agent latency for a person's line


async def test_handback_answers_the_caller_with_the_persons_words_in_the_models_context():
    async with Harness(script=["Okay, I see Alice helped you."]) as h:
        await h.idle()
        h.conv.take_over("alice")
        h.conv.say("Your card is blocked now.")
        await h.idle()
        await h.conv.push_text("thanks, what else should I do")
        await asyncio.sleep(0.05)
        before = len(h.chat.requests)
        result = h.conv.hand_back()
        assert result.status == 200 and result.body["answering"] is True
        await h.until(lambda h: "Okay, I see Alice helped you." in finals(h))
        assert len(h.chat.requests) == before + 1
        messages = h.chat.requests[-1].messages
        notes = [m["content"] for m in messages if m["role"] == "system"]
        note = 'A human colleague (alice) said to the caller: "Your card is blocked now."'
        assert note in notes
        assert messages[-1] == {"role": "user", "content": "thanks, what else should I do"}
        assert takeovers(h) == [(True, "alice"), (False, "alice")]
        assert h.conv.hand_back().status == 409  # not taken over any more


async def test_handback_after_the_person_spoke_last_waits_for_the_caller():
    async with Harness() as h:
        await h.idle()
        h.conv.take_over("alice")
        h.conv.say("Goodbye from Alice, the agent is back.")
        await h.idle()
        before = len(h.chat.requests)
        assert h.conv.hand_back().body["answering"] is False
        await asyncio.sleep(0.1)
        assert len(h.chat.requests) == before


async def test_a_second_takeover_is_refused_and_an_ended_conversation_is_gone():
    async with Harness() as h:
        await h.idle()
        assert h.conv.take_over("alice").ok
        second = h.conv.take_over("bob")
        assert second.status == 409 and "alice" in second.detail
    assert h.conv.take_over("bob").status == 404
    assert h.conv.say("hello").status == 404 and h.conv.hand_back().status == 404


async def test_the_time_limit_waits_while_a_person_has_the_call():
    limited = TurnTaking(reprompt_after_s=0, max_conversation_s=0.3, time_limit_line="Time is up.")
    async with Harness(turn_taking=lambda: limited) as h:
        await h.idle()
        h.conv.take_over("alice")
        await asyncio.sleep(0.6)
        assert not h.conv.closed and "Time is up." not in finals(h)
        assert h.conv._limit is not None  # asked again later
