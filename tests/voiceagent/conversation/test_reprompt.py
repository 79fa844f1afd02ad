"""Re-prompts, the goodbye to a silent caller and the length bound (issue 16, no dead air) on the
cascade engine with instant providers. Small settings; order and presence only, no timings."""

from __future__ import annotations

import asyncio

from enginekit import Harness

from voiceagent.conversation.testing import InstantTTS
from voiceagent.conversation.timers import CALLER_SILENT, TIME_LIMIT
from voiceagent.conversation.turn_taking import TurnTaking

QUICK = TurnTaking(
    reprompt_after_s=0.25,
    max_reprompts=2,
    reprompt="Still there?",
    goodbye="Goodbye then.",
    max_conversation_s=0,
    time_limit_line="Time is up.",
)


def harness(settings: TurnTaking = QUICK, **kw) -> Harness:
    return Harness(turn_taking=lambda: settings, **kw)


def finals(h: Harness) -> list[str]:
    return [e.text for e in h.of("AgentResponse") if e.final]


def ended(h: Harness) -> bool:
    return any(e.kind == "StateChange" and e.state == "ended" for e in h.events)


async def test_silent_caller_is_reprompted_then_told_goodbye_and_the_conversation_closes():
    async with harness() as h:
        await h.until(ended, timeout=5)
        assert finals(h) == ["Hello, front desk.", "Still there?", "Still there?", "Goodbye then."]
        assert h.conv.close_reason == CALLER_SILENT
        said = [t.content for t in h.conv.history if t.role == "assistant"]
        assert said == ["Hello, front desk.", "Still there?", "Still there?", "Goodbye then."]
        assert h.conv._idle is None and h.conv._limit is None  # timers gone with the conversation


async def test_caller_activity_starts_the_reprompts_over():
    async with harness() as h:
        await h.until(lambda h: "Still there?" in finals(h))
        await h.idle()
        await h.conv.push_text("yes I am")  # typed: caller activity, answered
        await h.until(ended, timeout=5)
        after = finals(h)[finals(h).index("Okay.") + 1 :]
        assert after == ["Still there?", "Still there?", "Goodbye then."]  # two again, not one
        assert h.conv.close_reason == CALLER_SILENT


async def test_keypad_counts_as_the_caller():
    async with harness() as h:
        await h.until(lambda h: "Still there?" in finals(h))
        await h.idle()
        h.conv.push_dtmf("1")
        h.conv.push_dtmf("#")
        await h.until(ended, timeout=5)
        assert finals(h).count("Still there?") == 3  # one before the keypad, two after


async def test_paused_conversation_is_not_reprompted():
    async with harness() as h:
        await h.idle()
        await h.conv.pause()
        await asyncio.sleep(0.5)  # more than three silences' worth
        assert "Still there?" not in finals(h) and not ended(h)
        await h.conv.resume()
        await h.until(lambda h: "Still there?" in finals(h))


async def test_zero_disables_reprompts():
    settings = TurnTaking(reprompt_after_s=0, max_conversation_s=0)
    async with harness(settings) as h:
        await h.idle()
        await asyncio.sleep(0.4)
        assert finals(h) == ["Hello, front desk."] and not ended(h)
        assert h.conv._idle is None and h.conv._limit is None


async def test_time_limit_stops_the_agent_says_its_line_and_closes():
    settings = TurnTaking(reprompt_after_s=0, max_conversation_s=0.3, time_limit_line="Time is up.")
    long_answer = " ".join(["word"] * 60)  # 60 words at 20 ms: still playing at the limit
    async with harness(settings, script=[long_answer]) as h:
        await h.idle()
        await h.conv.push_text("tell me everything")
        await h.until(ended, timeout=5)
        assert finals(h)[-1] == "Time is up."
        assert h.conv.close_reason == TIME_LIMIT
        said = [t.content for t in h.conv.history if t.role == "assistant"]
        assert said[-1] == "Time is up."
        assert said[-2].startswith("word") and said[-2].endswith("…")  # stopped: what was heard
        assert any(e.kind == "StopAudio" for e in h.events)


async def test_after_the_time_limit_input_is_refused():
    settings = TurnTaking(reprompt_after_s=0, max_conversation_s=0.2, time_limit_line="Time is up.")
    async with harness(settings, tts=InstantTTS(ms_per_word=200, chunk_ms=20)) as h:
        await h.until(lambda h: "Time is up." in finals(h))
        await h.conv.push_text("wait, one more thing")  # while the line plays
        h.conv.push_dtmf("#")
        await h.until(ended, timeout=5)
        assert [t.content for t in h.conv.history if t.role == "user"] == []
        assert "Okay." not in finals(h) and h.conv.close_reason == TIME_LIMIT
