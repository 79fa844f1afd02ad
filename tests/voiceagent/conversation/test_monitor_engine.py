"""The monitor engine: two channels of a call people handle become two speakers, stored in order
(instant scripted providers: the listening machinery is the cascade's, tested elsewhere)."""

from __future__ import annotations

import asyncio

import pytest
from enginekit import SILENCE, TONE

from voiceagent.conversation.monitor import EXTERNAL, INTERNAL, PERSON_AGENT, MonitorConversation
from voiceagent.conversation.session import PERSON, InMemorySessionStore, SessionState
from voiceagent.conversation.testing import EnergyVAD, ScriptedSTT


def monitor(texts: list[str], store: InMemorySessionStore | None = None, **kw) -> MonitorConversation:
    return MonitorConversation(
        "call-1",
        scenario="desk",
        store=store or InMemorySessionStore(),
        stt=ScriptedSTT(texts, interim_after=2),
        vad_factory=EnergyVAD,
        transport="contactcenter",
        **kw,
    )


async def say(conversation: MonitorConversation, channel: str, frames: int = 10) -> None:
    """Speech on ``channel`` then enough silence to end the turn, the other channel silent."""
    other = INTERNAL if channel == EXTERNAL else EXTERNAL
    for frame in [TONE] * frames + [SILENCE] * 150:
        conversation.push_audio(frame, 16000, channel)
        conversation.push_audio(SILENCE, 16000, other)
        await asyncio.sleep(0)


async def until(predicate, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


async def test_both_channels_become_two_speakers_stored_in_order():
    store = InMemorySessionStore()
    conversation = monitor(["i lost my card", "let me block it for you", "thank you"], store)
    await conversation.start()
    events = []

    async def read():
        async for event in conversation.events():
            events.append(event)

    reader = asyncio.create_task(read())
    await say(conversation, EXTERNAL)
    await until(lambda: len(conversation.history) == 1)
    await say(conversation, INTERNAL)
    await until(lambda: len(conversation.history) == 2)
    await say(conversation, EXTERNAL)
    await until(lambda: len(conversation.history) == 3)
    await conversation.close("test over")
    await reader
    turns = store.turns["call-1"]
    assert [(t.role, t.content, t.speaker) for t in turns] == [
        ("user", "i lost my card", None),
        ("assistant", "let me block it for you", PERSON),
        ("user", "thank you", None),
    ]
    assert turns[1].agent == PERSON_AGENT
    finals = [(e.speaker, e.text) for e in events if e.kind == "Transcript" and e.final]
    said = [("user", "i lost my card"), ("person", "let me block it for you"), ("user", "thank you")]
    assert finals == said
    interims = {e.speaker for e in events if e.kind == "Transcript" and not e.final}
    assert interims == {"user", "person"}
    assert [e.state for e in events if e.kind == "StateChange"] == ["listening", "ended"]
    assert not any(e.kind == "Audio" for e in events)
    assert conversation.closed and conversation.close_reason == "test over"


async def test_the_session_the_transport_made_is_kept_and_a_missing_one_is_created():
    store = InMemorySessionStore()
    await store.save(SessionState("call-1", "desk", active_agent="front", transport="contactcenter"))
    kept = monitor([], store)
    await kept.start()
    assert kept.state is not None and kept.state.active_agent == "front"
    await kept.close()
    fresh = monitor([], InMemorySessionStore())
    await fresh.start()
    assert fresh.state is not None and fresh.state.active_agent == PERSON_AGENT
    await fresh.close()


async def test_words_still_being_said_at_the_close_are_stored():
    conversation = monitor(["goodbye then"])
    await conversation.start()
    for _ in range(10):
        conversation.push_audio(TONE, 16000, EXTERNAL)
        await asyncio.sleep(0)
    await conversation.close("hung up")
    assert [t.content for t in conversation.history] == ["goodbye then"]


async def test_a_mono_monitor_hears_only_its_channel():
    conversation = monitor(["hello"], channels=(INTERNAL,))
    await conversation.start()
    assert conversation.push_audio(TONE, 16000, EXTERNAL) is False
    await say(conversation, INTERNAL)
    await until(lambda: len(conversation.history) == 1)
    assert conversation.history[0].speaker == PERSON
    await conversation.close()


def test_the_runtime_makes_a_monitor_on_its_recogniser_with_a_vad_per_channel(settings):
    from voiceagent.runtime import Runtime

    runtime = Runtime()
    with pytest.raises(RuntimeError, match="not started"):
        runtime.new_conversation_for("monitor", "s1", "desk", transport="contactcenter")
    runtime.stt, runtime.vad_factory = ScriptedSTT([]), EnergyVAD
    made = runtime.new_conversation_for("monitor", "s1", "desk", transport="contactcenter")
    assert isinstance(made, MonitorConversation) and made.transport == "contactcenter"
    assert set(made.listeners) == {EXTERNAL, INTERNAL}
    assert made.listeners[EXTERNAL].vad is not made.listeners[INTERNAL].vad
    assert all(listener.stt is runtime.stt for listener in made.listeners.values())
