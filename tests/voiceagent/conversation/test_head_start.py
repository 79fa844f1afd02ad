"""The answer begun in the caller's pause (voiceagent/conversation/head_start.py): begun while the
end of the turn is waited for, adopted when the turn asks exactly what it asked, dropped (its
model stream closed, nothing emitted, no tool run) when the caller goes on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.voiceagent.conversation.enginekit import SILENCE, TONE, Harness
from voiceagent.conversation import head_start
from voiceagent.conversation.head_start import ClauseAudio
from voiceagent.conversation.providers import ChatChunk, ChatRequest, ProviderError, ToolCallRequest
from voiceagent.conversation.specs import VoiceSpec
from voiceagent.conversation.testing import InstantTTS

pytestmark = pytest.mark.asyncio

REPLY = "Sure, I can check that for you right now. It will take a moment."
UNSURE = -0.6  # the recogniser's doubt: a complete-sounding turn waits ~1 s of silence, not 200 ms


class RecordingChat:
    """A model that answers every request with ``REPLY`` (or a tool call), recording when each
    request came (loop time) and whether its stream was read to the end or closed early."""

    name = "recording-chat"

    def __init__(self, tool_call: bool = False, first_token_s: float = 0.05) -> None:
        self.requests: list[tuple[float, ChatRequest]] = []
        self.closed_early = 0
        self.tool_call = tool_call
        self.first_token_s = first_token_s

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        self.requests.append((asyncio.get_running_loop().time(), request))
        finished = False
        try:
            await asyncio.sleep(self.first_token_s)  # a model's time to its first token
            if self.tool_call and request.messages[-1]["role"] == "user":
                yield ChatChunk(
                    tool_calls=[ToolCallRequest(id="c1", name="lookup", arguments='{"account": "7"}')]
                )
            else:
                for word in REPLY.split(" "):
                    yield ChatChunk(text=word + " ")
            yield ChatChunk(done=True, finish_reason="stop")
            finished = True
        finally:
            self.closed_early += not finished

    async def warm(self) -> bool:
        return True

    async def close(self) -> None:
        return None


def _harness(chat: RecordingChat, enabled: bool = True) -> Harness:
    h = Harness(texts=["can you check my account please"], head_start=lambda: enabled)
    h.stt.on_demand, h.stt.logprob = True, UNSURE
    h.chat = h.conv.chat = chat
    return h


async def _pause(h: Harness, frames: int) -> None:
    for _ in range(frames):
        h.conv.push_audio(SILENCE)
        await asyncio.sleep(0.005)


async def _speak(h: Harness, frames: int = 12) -> None:
    for _ in range(frames):
        h.conv.push_audio(TONE)
    await asyncio.sleep(0.01)


def _answers(h: Harness) -> list[str]:
    return [e.text.strip() for e in h.of("AgentResponse") if e.final and e.text != "Hello, front desk."]


async def test_the_answer_is_begun_in_the_pause_and_adopted_when_the_turn_ends():
    chat = RecordingChat()
    async with _harness(chat) as h:
        await h.idle()
        await _speak(h)
        await _pause(h, 20)  # 400 ms: the words are in, the doubt holds the turn ~1 s
        assert h.conv._utterance is not None, "the turn ended already: nothing to begin ahead"
        await h.until(lambda h: len(chat.requests) == 1)
        assert _answers(h) == [] and not [e for e in h.of("Transcript") if e.final]  # nothing ahead
        await _pause(h, 50)  # the turn ends
        await h.until(lambda h: _answers(h))
        await h.idle()
    asked_at, request = chat.requests[0]
    assert len(chat.requests) == 1, "the turn asked the model again instead of taking its head start"
    assert asked_at < h.conv.turn_ended_at  # asked in the pause, before the turn ended
    assert request.messages[-1] == {"role": "user", "content": "can you check my account please"}
    assert _answers(h) == [REPLY.strip()]
    assert h.tts.spoken.count("Sure, I can check that for you right now.") == 1  # synthesised once, ahead


def _counted(outcome: str) -> float:
    from prometheus_client import REGISTRY

    from voiceagent.observability import metrics  # noqa: F401 - it subscribes the counter

    return REGISTRY.get_sample_value("voiceagent_head_starts_total", {"outcome": outcome}) or 0.0


async def test_the_caller_going_on_drops_it_and_the_turn_asks_again():
    chat = RecordingChat(first_token_s=0.3)  # still on its way when the caller goes on
    before = dict(head_start.COUNTS)
    dropped = _counted("dropped")
    async with _harness(chat) as h:
        await h.idle()
        await _speak(h)
        await _pause(h, 20)
        await h.until(lambda h: len(chat.requests) == 1)
        await _speak(h)  # the caller goes on: the head start is stale
        await h.until(lambda h: chat.closed_early == 1)  # its model stream was closed
        assert h.conv._head_start is None and _answers(h) == []
        await _pause(h, 70)
        await h.until(lambda h: _answers(h))
        await h.idle()
    assert len(chat.requests) == 2  # the dropped one, then the turn's own (begun in its last pause)
    assert _answers(h) == [REPLY.strip()]  # answered once: nothing of the dropped one was emitted
    assert head_start.COUNTS["dropped"] - before["dropped"] == 1
    assert head_start.COUNTS["used"] - before["used"] == 1
    assert _counted("dropped") - dropped == 1  # and on /metrics


async def test_a_request_that_changed_meanwhile_is_not_adopted():
    """What the turn would ask changed between the pause and the end of the turn (a profile
    attached to the session's memory): the head start is dropped and the model asked again."""
    chat = RecordingChat()
    async with _harness(chat) as h:
        await h.idle()
        await _speak(h)
        await _pause(h, 20)
        await h.until(lambda h: len(chat.requests) == 1)
        h.conv.state.memory["caller_name"] = "Maria"
        await _pause(h, 50)
        await h.until(lambda h: _answers(h))
        await h.idle()
    assert len(chat.requests) == 2
    assert "caller_name" not in chat.requests[0][1].memory  # the copy it asked with
    assert chat.requests[1][1].memory["caller_name"] == "Maria"


async def test_tools_are_not_run_ahead_of_the_turn():
    chat = RecordingChat(tool_call=True)
    async with _harness(chat) as h:
        await h.idle()
        await _speak(h)
        await _pause(h, 20)
        await h.until(lambda h: len(chat.requests) == 1)
        await asyncio.sleep(0.1)  # its round, with the tool call, is in
        assert not h.of("ToolCall")
        await _speak(h)  # the caller goes on: the tool is never run for the dropped head start
        await asyncio.sleep(0.05)
        assert not h.of("ToolCall")
        await _pause(h, 70)
        await h.until(lambda h: h.of("ToolCall"))
        await h.idle()
    assert [e.name for e in h.of("ToolCall")] == ["lookup"]  # once, for the turn that was answered


async def test_a_person_taking_the_call_in_the_pause_drops_it():
    """The turn that ends is stored for the person, not answered: the head start goes unused."""
    chat = RecordingChat(first_token_s=0.3)
    async with _harness(chat) as h:
        await h.idle()
        await _speak(h)
        await _pause(h, 20)
        await h.until(lambda h: len(chat.requests) == 1)
        assert h.conv.take_over("alice").ok
        await _pause(h, 50)
        await h.until(lambda h: any(t.role == "user" for t in h.conv.history))
        await h.until(lambda h: chat.closed_early == 1)
        assert h.conv._head_start is None and _answers(h) == []
    assert len(chat.requests) == 1  # the model was not asked for the person's call


async def test_unfinished_words_and_a_disabled_head_start_begin_nothing():
    chat = RecordingChat()
    async with _harness(chat, enabled=False) as h:
        await h.idle()
        await _speak(h)
        await _pause(h, 20)
        await asyncio.sleep(0.1)
        assert chat.requests == [] and h.conv._utterance is not None
    chat = RecordingChat()
    h = _harness(chat)
    h.stt.texts.clear()
    h.stt.texts.append("my card number is")  # the clause goes on: the maximum wait, usually continued
    async with h:
        await h.idle()
        await _speak(h)
        await _pause(h, 20)
        await asyncio.sleep(0.1)
        assert chat.requests == [] and h.conv._head_start is None


class FailingOnceTTS(InstantTTS):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    async def synthesize(self, text: str, voice: VoiceSpec) -> AsyncIterator[bytes]:
        self.calls += 1
        if self.calls == 1:
            raise ProviderError("the voice failed")
        async for pcm in super().synthesize(text, voice):
            yield pcm


async def test_a_clause_whose_synthesis_ahead_failed_is_synthesised_again():
    tts = FailingOnceTTS()
    voice = VoiceSpec("en-US-Ava")
    audio = ClauseAudio(tts, "Sure, I can check that.", voice)
    await asyncio.sleep(0.01)
    chunks = [
        pcm async for pcm in audio.stream(voice, lambda: tts.synthesize("Sure, I can check that.", voice))
    ]
    assert chunks and tts.calls == 2


async def test_a_clause_made_ahead_in_another_voice_is_synthesised_in_the_one_asked():
    tts = InstantTTS()
    audio = ClauseAudio(tts, "Hello.", VoiceSpec("a"))
    again = VoiceSpec("b")
    chunks = [pcm async for pcm in audio.stream(again, lambda: tts.synthesize("Hello.", again))]
    await asyncio.sleep(0)
    assert chunks and audio.task.done()  # the one made ahead was cancelled (or had finished)
