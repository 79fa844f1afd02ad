"""A client that stops sending mid-turn (voiceagent.conversation.stream_gaps): the gap is silence.

These wait on the loop's clock (the gap is GAP_S of wall time without audio), but assert only what
was decided, never how long it took."""

from __future__ import annotations

import asyncio
import logging
import re

from enginekit import AGENTS, RATE, SCENARIO, SILENCE, TONE, Harness, make_registry

from voiceagent.conversation.engine import Conversation, EngineConfig
from voiceagent.conversation.session import InMemorySessionStore
from voiceagent.conversation.stream_gaps import GAP_S
from voiceagent.conversation.testing import EnergyVAD, InstantTTS, ScriptedChat, ScriptedSTT, StaticDirectory
from voiceagent.conversation.turn_taking import TurnTaking


async def test_a_client_that_stops_sending_after_its_speech_still_gets_its_turn_answered():
    """Speech, 40 ms of silence, then nothing (a push-to-talk released): not even the pause's
    hypothesis was asked (at 100 ms), so without the gap heard as silence the turn never ended."""
    async with Harness(script=["Sure."], texts=["what is my balance"]) as h:
        await h.idle()
        h.speak(speech_frames=10, silence_frames=2)
        await h.until(lambda h: h.of("AgentResponse")[1:], timeout=5 * GAP_S + 3)
    heard = [e.text for e in h.of("Transcript") if e.final]
    assert heard == ["what is my balance"], heard
    assert [e.text for e in h.of("AgentResponse") if e.final][-1] == "Sure."


async def test_a_gap_shorter_than_a_stall_is_not_the_callers_silence():
    """Audio that stops for less than GAP_S and comes back (a network stall) is one utterance:
    nothing was filled in, so the 200 ms wait did not end the turn in the gap."""
    async with Harness(script=["Sure."], texts=["what is my balance"]) as h:
        await h.idle()
        h.speak(speech_frames=10, silence_frames=0)
        await asyncio.sleep(GAP_S / 3)
        assert h.conv._utterance is not None and h.conv._silence_ms == 0
        h.speak(speech_frames=10, silence_frames=15)
        await h.idle()
    assert [e.text for e in h.of("Transcript") if e.final] == ["what is my balance"]


class DoubtingTurnModel:
    """A turn model that hears more coming (Smart Turn on a slow synthetic voice)."""

    name = "doubting-turn-model"

    def predict(self, pcm16, on_result, wanted=None) -> bool:
        asyncio.get_running_loop().call_soon(on_result, 0.05)
        return True


async def test_a_wait_longer_than_the_silence_sent_is_counted_on_in_the_gap(caplog):
    """The model's doubt holds "Tell me a joke." to 1050 ms; the client sent 300 ms of silence and
    stopped (as the test clients of tests/calls do). The turn ends, and only when the silence -
    sent and filled - reached the wait: the filling did not shorten it."""
    settings = TurnTaking(endpointing_min_ms=500, endpointing_max_ms=1600)
    conv = Conversation(
        "gaps",
        scenario="desk",
        directory=StaticDirectory(AGENTS, SCENARIO, make_registry()),
        store=InMemorySessionStore(),
        stt=ScriptedSTT(["tell me a joke"]),
        tts=InstantTTS(),
        chat=ScriptedChat(),
        vad=EnergyVAD(),
        config=EngineConfig(silence_timeout_ms=lambda: 500, turn_taking=lambda: settings),
        turn_model=DoubtingTurnModel(),
    )
    await conv.start()
    try:
        for _ in range(20):  # the greeting
            await asyncio.sleep(0)
        with caplog.at_level(logging.DEBUG, logger="voiceagent.conversation"):
            for _ in range(40):
                conv.push_audio(TONE, RATE)
                await asyncio.sleep(0)
            for _ in range(15):
                conv.push_audio(SILENCE, RATE)
                await asyncio.sleep(0)
            assert conv._utterance is not None
            async with asyncio.timeout(GAP_S + 5):
                while conv._utterance is not None:
                    await asyncio.sleep(0.01)
    finally:
        await conv.close()
    ends = [r.getMessage() for r in caplog.records if ": end of turn after " in r.getMessage()]
    assert len(ends) == 1, ends
    silence, wait = map(int, re.search(r"after (\d+) ms of silence: wait (\d+) ms", ends[0]).groups())
    assert wait == 1050 and wait <= silence < wait + 200, ends[0]
