"""Turn-taking in the live (speech-to-speech) loop, through the real VoiceLive and OpenAI clients
against the local realtime peer (tests/support/realtime_peer.py, whose VAD works on the audio we
append): speech over the agent shorter than min_interruption_ms does not stop it, a backchannel
is no turn, longer speech or a real word stops it; the session's turn detection follows the
turn-taking settings and leaves both decisions to us."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from enginekit import AGENTS, RATE, SCENARIO, SILENCE, TONE, ConversationDriver, make_registry
from realtime_peer import Call, RealtimePeer, Say

from voiceagent.conversation.live import LiveConfig, LiveConversation
from voiceagent.conversation.live_turns import finished_words
from voiceagent.conversation.session import InMemorySessionStore
from voiceagent.conversation.specs import VoiceSpec
from voiceagent.conversation.stream_gaps import GAP_S
from voiceagent.conversation.testing import StaticDirectory
from voiceagent.conversation.tools import ToolRegistry
from voiceagent.conversation.turn_taking import TurnTaking, TurnTakingSpec
from voiceagent.llm.realtime import OpenAIRealtimeClient, VoiceLiveClient

KEY = "live-turns-key-0123456789"
KINDS = ["voicelive", "openai"]
STORY = " ".join(f"word{i}" for i in range(30)) + "."


@pytest.fixture(scope="module")
def peer():
    with RealtimePeer(api_key=KEY) as server:
        yield server


@pytest.fixture(autouse=True)
def _clean_peer(peer):
    peer.reset()
    yield
    peer.reset()


def client_for(kind: str, peer: RealtimePeer, model: str = "gpt-realtime"):
    if kind == "voicelive":
        return VoiceLiveClient(peer.url, model, api_key=KEY, connect_timeout=3.0)
    return OpenAIRealtimeClient(model, api_key=KEY, base_url=peer.openai_base_url, connect_timeout=3.0)


class Live(ConversationDriver):
    wait_s = 5.0

    def __init__(
        self,
        client,
        *,
        turns: TurnTaking | None = None,
        agent_turns=None,
        silence_ms=200,
        registry=None,
        **kw,
    ):
        super().__init__()
        agents = list(AGENTS)
        if agent_turns is not None:
            agents[0] = replace(agents[0], turn_taking=agent_turns)
        self.store = InMemorySessionStore()
        self.client = client
        config = LiveConfig(
            silence_timeout_ms=lambda: silence_ms,
            turn_taking=lambda: turns or TurnTaking(),
            default_voice=lambda: VoiceSpec("alloy"),
            **kw,
        )
        self.conv = LiveConversation(
            "s1",
            scenario="desk",
            directory=StaticDirectory(agents, SCENARIO, registry or make_registry()),
            store=self.store,
            client=client,
            registry=registry or make_registry(),
            config=config,
        )

    async def __aenter__(self):
        self._reader = asyncio.create_task(self._read())
        await self.conv.start()
        return self

    async def __aexit__(self, *exc):
        await self.conv.close()
        await asyncio.wait_for(self._reader, 3)
        await self.client.close()

    async def quiet(self):
        """Nothing open: no response, nothing waiting to be sent, the audio played."""
        c = self.conv
        await self.until(
            lambda h: (
                c.closed
                or (
                    c._current is None
                    and c.responses_requested == 0
                    and not getattr(c, "_waiting_creates", ())
                    and not c._control
                    and c.loop_time() >= c.playback_end
                    and not c._open_items
                    and c._state_name == "listening"
                )
            )
        )

    async def agent_talking(self, rid: int):
        await self.until(lambda h: len([a for a in h.of("Audio") if a.response_id == rid]) >= 2)

    def user_texts(self) -> list[str]:
        return [t.content for t in self.store.turns.get("s1", []) if t.role == "user"]

    def said(self) -> list[str]:
        turns = self.store.turns.get(
            "s1", []
        )  # heard: a reply is in the store "unknown" from when it is sent
        return [t.content for t in turns if t.role == "assistant" and t.heard != "unknown"]


def story_turn(peer: RealtimePeer, *caller: str) -> None:
    """The caller asks for a story (2.4 s of agent audio, streamed over ~1.2 s), then says ``caller``."""
    peer.user_says("tell me a story", *caller)
    peer.push(Say(STORY, chunks=12, audio_ms=2400, interval=0.1, late_deltas=1))


@pytest.mark.parametrize("kind", KINDS)
async def test_a_short_backchannel_over_the_agent_neither_stops_it_nor_gets_an_answer(kind, peer):
    story_turn(peer, "uh-huh")
    async with Live(client_for(kind, peer), turns=TurnTaking(min_interruption_ms=3000)) as h:
        await h.quiet()
        h.speak()
        await h.agent_talking(2)
        h.speak(speech_frames=3)  # 60 ms of "uh-huh" over the agent, then silence
        await h.until(lambda h: peer.received("conversation.item.delete"))
        await h.quiet()
        creates = len(peer.received("response.create"))
    assert not h.of("StopAudio")
    assert not peer.received("response.cancel") and not peer.received("conversation.item.truncate")
    assert creates == 2  # the greeting and the story: nothing for "uh-huh"
    assert h.said() == ["Hello, front desk.", STORY]  # heard to the end
    assert h.user_texts() == ["tell me a story"]
    assert "Transcript(final:uh-huh)" not in h.kinds()
    (delete,) = peer.received("conversation.item.delete")  # the model does not answer it later
    assert delete["item_id"].startswith("item_")
    assert peer.connections[0].interrupted == 0  # the service did not stop its answer either
    assert not [e for e in h.of("Error")]


@pytest.mark.parametrize("kind", KINDS)
async def test_speech_longer_than_min_interruption_stops_the_agent(kind, peer):
    story_turn(peer, "wait a second")
    async with Live(client_for(kind, peer), turns=TurnTaking(min_interruption_ms=150)) as h:
        await h.quiet()
        h.speak()
        await h.agent_talking(2)
        while not h.of("StopAudio"):  # the caller keeps talking, in real time, until stopped
            h.conv.push_audio(TONE, RATE)
            await asyncio.sleep(0.02)
        for _ in range(15):
            h.conv.push_audio(SILENCE, RATE)
        await h.until(lambda h: len(h.user_texts()) == 2)
        await h.quiet()
    (stop,) = h.of("StopAudio")
    assert stop.reason == "barge_in" and stop.response_id == 2
    assert len(peer.received("response.cancel")) == 1
    assert peer.connections[0].interrupted == 0  # we stopped it, not the service
    assert h.user_texts() == ["tell me a story", "wait a second"]
    story, answer = h.said()[1:]
    assert story.endswith("…") and answer == "Okay."  # cut where heard, then the answer


@pytest.mark.parametrize("kind", KINDS)
async def test_a_short_real_word_over_the_agent_stops_it_when_transcribed(kind, peer):
    story_turn(peer, "stop")
    async with Live(client_for(kind, peer), turns=TurnTaking(min_interruption_ms=3000)) as h:
        await h.quiet()
        h.speak()
        await h.agent_talking(2)
        h.speak(speech_frames=3)  # shorter than the minimum, but a word
        await h.until(lambda h: len(h.user_texts()) == 2)
        await h.quiet()
    assert [s.reason for s in h.of("StopAudio")] == ["barge_in"]
    assert not peer.received("conversation.item.delete")
    kinds = h.kinds()
    assert kinds[kinds.index("StopAudio") :][:2] == ["StopAudio", "Transcript(final:stop)"]
    assert h.said()[-1] == "Okay." and h.said()[1].endswith("…")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_barge_in_before_the_transcript_arrived_keeps_the_heard_turn(kind, peer):
    """The service's transcript deltas trail its audio (here by all 12 chunks): the caller cuts in
    after hearing some of the story, before any of its words are known. The turn stays, as "…"."""
    peer.user_says("tell me a story", "stop")
    peer.push(Say(STORY, chunks=12, audio_ms=2400, interval=0.1, late_deltas=1, transcript_lag=12))
    async with Live(client_for(kind, peer), turns=TurnTaking(min_interruption_ms=3000)) as h:
        await h.quiet()
        h.speak()
        await h.agent_talking(2)
        h.speak(speech_frames=3)
        await h.until(lambda h: len(h.user_texts()) == 2)
        await h.quiet()
    assert [s.reason for s in h.of("StopAudio")] == ["barge_in"]
    assert h.said() == ["Hello, front desk.", "…", "Okay."]


@pytest.mark.parametrize("kind", KINDS)
async def test_speech_while_the_agent_is_quiet_is_a_turn_at_once(kind, peer):
    peer.user_says("okay")  # a backchannel word, but nothing to acknowledge: it is an answer
    async with Live(client_for(kind, peer), turns=TurnTaking(min_interruption_ms=3000)) as h:
        await h.quiet()
        h.speak()
        await h.until(lambda h: len(h.said()) == 2)
    assert h.user_texts() == ["okay"] and h.said() == ["Hello, front desk.", "Okay."]
    assert not h.of("StopAudio")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_caller_who_stops_sending_mid_speech_still_gets_an_answer(kind, peer):
    """Speech, 40 ms of silence, then no audio at all (push-to-talk released): the service's VAD
    counts silence on the audio appended, so without the gap sent as silence (StreamGaps) it never
    said speech_stopped and the caller waited forever."""
    peer.user_says("okay")
    async with Live(client_for(kind, peer)) as h:
        await h.quiet()
        h.speak(speech_frames=10, silence_frames=2)
        await h.until(lambda h: len(h.said()) == 2, timeout=5 * GAP_S + 5)
    assert h.user_texts() == ["okay"] and h.said() == ["Hello, front desk.", "Okay."]


@pytest.mark.parametrize("kind", KINDS)
async def test_session_turn_detection_follows_the_turn_taking_settings(kind, peer):
    turns = TurnTaking(endpointing_min_ms=500, endpointing_max_ms=1600)
    spec = TurnTakingSpec(endpointing_max_ms=2500)  # the agent's override
    model = "gpt-4o"  # a VoiceLive cascaded model: end-of-utterance detection applies
    async with Live(client_for(kind, peer, model), turns=turns, agent_turns=spec, silence_ms=350) as h:
        await h.quiet()
    async with Live(client_for(kind, peer, model), turns=turns, semantic_vad=True) as h2:
        await h2.quiet()
    first, semantic = [u["session"] for u in peer.received("session.update")]
    assert not [e for e in h.of("Error") + h2.of("Error")]  # the peer accepted both
    if kind == "voicelive":
        assert first["turn_detection"] == {
            "type": "server_vad",
            "threshold": 0.5,
            "prefix_padding_ms": 300,
            "silence_duration_ms": 350,
            "create_response": False,
            "interrupt_response": False,
            "auto_truncate": False,
            "end_of_utterance_detection": {
                "model": "semantic_detection_v1",
                "threshold_level": "default",
                "timeout_ms": 2500,
            },
        }
        assert semantic["turn_detection"]["type"] == "azure_semantic_vad"
        assert semantic["turn_detection"]["end_of_utterance_detection"]["timeout_ms"] == 1600
    else:
        assert first["audio"]["input"]["turn_detection"] == {
            "type": "server_vad",
            "threshold": 0.5,
            "prefix_padding_ms": 300,
            "silence_duration_ms": 350,
            "create_response": False,
            "interrupt_response": False,
        }
        assert semantic["audio"]["input"]["turn_detection"] == {
            "type": "semantic_vad",
            "eagerness": "high",  # the most eager (waits at most 2 s): nearest a 1.6 s bound
            "create_response": False,
            "interrupt_response": False,
        }


async def test_voicelive_realtime_models_get_no_end_of_utterance_detection(peer):
    async with Live(client_for("voicelive", peer, "gpt-realtime")) as h:
        await h.quiet()
    (update,) = peer.received("session.update")
    assert "end_of_utterance_detection" not in update["session"]["turn_detection"]
    assert not h.of("Error")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_slow_tool_brings_filler_lines_then_the_answer(kind, peer):
    registry = ToolRegistry()

    @registry.tool()
    async def lookup(account: str) -> dict:
        """Look up an account (slowly).

        Args:
            account: the account number
        """
        await asyncio.sleep(1.0)
        return {"account": account, "balance": 42}

    peer.user_says("what is my balance")
    peer.push(Call("lookup", {"account": "1"}), Say("It is 42."))
    turns = TurnTaking(filler_after_ms=100, fillers=("One moment.",))
    async with Live(client_for(kind, peer), turns=turns, registry=registry) as h:
        await h.quiet()
        h.speak()
        await h.until(lambda h: "It is 42." in h.said())
        await h.quiet()
    said = h.said()
    assert said[0] == "Hello, front desk." and said[-1] == "It is 42."
    assert said[1:-1] and set(said[1:-1]) == {"One moment."}  # said while the tool ran
    kinds = h.kinds()
    assert kinds.index("AgentResponse(front:One moment.)") < kinds.index("ToolCall(lookup:ok)")
    # the answer's response.create went out once the filler's response was done, not refused
    creates = peer.received("response.create")
    assert "response" not in creates[-1] and len(creates) == 2 + len(said[1:-1]) + 1
    assert not h.of("Error")


def test_only_finished_words_of_an_interim_transcript_count():
    assert finished_words("ok") == ""  # "okay" still being transcribed
    assert finished_words("okay ") == "okay"
    assert finished_words("okay so") == "okay"
    assert finished_words("stop.") == "stop."
