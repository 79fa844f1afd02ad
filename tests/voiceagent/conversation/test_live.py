"""The live (speech-to-speech) engine through the real VoiceLive and OpenAI clients against the local
realtime peer (tests/support/realtime_peer.py): exact event sequences, as in test_engine.py."""

from __future__ import annotations

import asyncio
import base64
import time

import numpy as np
import pytest
from enginekit import AGENTS, RATE, SCENARIO, TONE, ConversationDriver, make_registry
from realtime_peer import Call, Drop, Fail, RealtimePeer, Say
from servers import free_port

from voiceagent.conversation.live import LiveConfig, LiveConversation
from voiceagent.conversation.session import PERSON, InMemorySessionStore, SessionState, Turn
from voiceagent.conversation.specs import AgentSpec, VoiceSpec
from voiceagent.conversation.testing import StaticDirectory
from voiceagent.llm.realtime import OpenAIRealtimeClient, VoiceLiveClient

KEY = "live-test-key-0123456789"
KINDS = ["voicelive", "openai"]


@pytest.fixture(scope="module")
def peer():
    with RealtimePeer(api_key=KEY) as server:
        yield server


@pytest.fixture(autouse=True)
def _clean_peer(peer):
    peer.reset()
    yield
    peer.reset()


def make_client(
    kind: str, url_peer: RealtimePeer | None = None, port: int | None = None, timeout: float = 3.0
):
    base = f"http://127.0.0.1:{port}" if port else url_peer.url
    if kind == "voicelive":
        return VoiceLiveClient(base, "gpt-realtime", api_key=KEY, connect_timeout=timeout)
    return OpenAIRealtimeClient("gpt-realtime", api_key=KEY, base_url=f"{base}/v1", connect_timeout=timeout)


class LiveHarness(ConversationDriver):
    wait_s = 5.0

    def __init__(self, client, *, agents=AGENTS, store=None, **config):
        super().__init__()
        self.registry = make_registry()
        self.store = store or InMemorySessionStore()
        self.directory = StaticDirectory(agents, SCENARIO, self.registry)
        config.setdefault("default_voice", lambda: VoiceSpec("en-US-AvaMultilingualNeural"))
        cfg = LiveConfig(silence_timeout_ms=lambda: 200, **config)
        self.client = client
        self.conv = LiveConversation(
            "s1",
            scenario="desk",
            directory=self.directory,
            store=self.store,
            client=client,
            registry=self.registry,
            config=cfg,
        )

    async def __aenter__(self):
        self._reader = asyncio.create_task(self._read())
        await self.conv.start()
        return self

    async def __aexit__(self, *exc):
        await self.conv.close()
        if self._reader:
            await asyncio.wait_for(self._reader, 3)
        await self.client.close()

    async def idle(self, timeout: float = 5.0):
        """Listening again: no response or tool round running, audio played, nothing left to send."""
        c = self.conv
        await self.until(
            lambda h: (
                c.closed
                or (
                    c._current is None
                    and c.responses_requested == 0
                    and (c._tool_task is None or c._tool_task.done())
                    and c.loop_time() >= c.playback_end
                    and not c._open_items
                    and not c._control
                    and not c._audio_out
                    and c._state_name == "listening"
                )
            ),
            timeout,
        )
        await asyncio.sleep(0.05)

    async def turn(self) -> None:
        """The caller says something and the agent has answered: the peer must have heard the
        utterance (a final transcript) before "idle" means anything, however loaded the machine."""
        heard = len([e for e in self.events if e.kind == "Transcript" and e.final])
        self.speak()
        await self.until(
            lambda h: (
                h.conv.closed or len([e for e in h.events if e.kind == "Transcript" and e.final]) > heard
            )
        )
        await self.idle()


@pytest.mark.parametrize("kind", KINDS)
async def test_greeting_configures_the_session_and_speaks(kind, peer):
    async with LiveHarness(make_client(kind, peer)) as h:
        await h.idle()
    assert h.kinds() == [
        "State(listening)",
        "State(speaking)",
        "AgentResponse(front:Hello, front desk.)",
        "State(listening)",
        "State(ended)",
    ]
    audio = h.of("Audio")
    assert audio and all(a.sample_rate == 24000 for a in audio)
    assert [a.seq for a in audio] == sorted(a.seq for a in audio)
    (update,) = peer.received("session.update")
    session = update["session"]
    assert session["instructions"] == "You are the front desk."
    assert [t["name"] for t in session["tools"]] == ["lookup", "to_billing", "to_tech"]
    assert all(t["type"] == "function" and t["parameters"]["type"] == "object" for t in session["tools"])
    if kind == "voicelive":
        assert session["turn_detection"] == {
            "type": "server_vad",
            "threshold": 0.5,
            "prefix_padding_ms": 300,
            "silence_duration_ms": 200,
            "create_response": False,  # the engine decides (live_turns.py)
            "interrupt_response": False,
            "auto_truncate": False,
        }
        assert session["input_audio_format"] == session["output_audio_format"] == "pcm16"
        assert session["input_audio_sampling_rate"] == 24000
        assert session["input_audio_transcription"]["model"]
        assert session["voice"] == {"name": "en-US-AvaMultilingualNeural", "type": "azure-standard"}
    else:
        audio_in, audio_out = session["audio"]["input"], session["audio"]["output"]
        assert session["type"] == "realtime"
        assert audio_in["turn_detection"]["silence_duration_ms"] == 200
        assert audio_in["format"] == audio_out["format"] == {"type": "audio/pcm", "rate": 24000}
        assert audio_in["transcription"]["model"]
        assert audio_out["voice"] == "alloy"  # an Azure voice name is not an OpenAI voice
    create = peer.received("response.create")[0]
    assert '"Hello, front desk."' in create["response"]["instructions"]
    assert [(t.role, t.content) for t in h.store.turns["s1"]] == [("assistant", "Hello, front desk.")]
    assert not [e for e in peer.received() if e["type"] == "error"]


@pytest.mark.parametrize("kind", KINDS)
async def test_spoken_turn_with_a_tool_call(kind, peer):
    peer.user_says("what is my balance")
    peer.push(Call("lookup", {"account": "123"}), Say("Your balance is 42 dollars."))
    async with LiveHarness(make_client(kind, peer)) as h:
        await h.idle()
        await h.turn()
    assert h.kinds()[4:] == [
        "Transcript(interim:what)",
        "Transcript(interim:what is my balance)",
        "Transcript(final:what is my balance)",
        "State(thinking)",
        "ToolCall(lookup:ok)",
        "State(speaking)",
        "AgentResponse(front:Your balance is 42 dollars.)",
        "State(listening)",
        "State(ended)",
    ]
    tool = h.of("ToolCall")[0]
    assert tool.arguments == {"account": "123"} and tool.result == {"account": "123", "balance": 42.5}
    # the output went back as a function_call_output item, then a response was requested
    types = peer.types()
    output_at = types.index("conversation.item.create")
    assert types[output_at + 1] == "response.create"
    item = peer.received("conversation.item.create")[0]["item"]
    assert item["type"] == "function_call_output" and item["call_id"]
    assert '"balance": 42.5' in item["output"]
    # the caller's audio went out resampled to 24 kHz in 20 ms appends
    appends = peer.received("input_audio_buffer.append")
    assert appends and all(len(a["audio"]) <= 4 * (960 // 3 + 1) * 2 for a in appends)
    history = [(t.role, t.content if t.role != "tool" else t.tool_name) for t in h.store.turns["s1"]]
    assert history == [
        ("assistant", "Hello, front desk."),
        ("user", "what is my balance"),
        ("tool", "lookup"),
        ("assistant", "Your balance is 42 dollars."),
    ]


@pytest.mark.parametrize("kind", KINDS)
async def test_announced_and_discrete_handoffs_switch_the_session(kind, peer):
    peer.user_says("i have a billing question", "go back", "my internet is down")
    peer.push(
        Call("to_billing", {"reason": "invoice"}),  # announced: billing greets
        Call("to_front", {}),  # announced back: the entry agent's return greeting
        Call("to_tech", {}),  # discrete: tech answers the pending request
        Say("Tech support speaking, what is wrong?"),
    )
    async with LiveHarness(make_client(kind, peer)) as h:
        await h.idle()
        for _ in range(3):
            await h.turn()
    assert h.kinds()[4:] == [
        "Transcript(interim:i)",
        "Transcript(interim:i have a billing question)",
        "Transcript(final:i have a billing question)",
        "State(thinking)",
        "ToolCall(to_billing:ok)",
        "Handoff(front->billing:announced)",
        "State(speaking)",
        "AgentResponse(billing:Billing here.)",
        "State(listening)",
        "Transcript(interim:go)",
        "Transcript(interim:go back)",
        "Transcript(final:go back)",
        "State(thinking)",
        "ToolCall(to_front:ok)",
        "Handoff(billing->front:announced)",
        "State(speaking)",
        "AgentResponse(front:Front again.)",
        "State(listening)",
        "Transcript(interim:my)",
        "Transcript(interim:my internet is down)",
        "Transcript(final:my internet is down)",
        "State(thinking)",
        "ToolCall(to_tech:ok)",
        "Handoff(front->tech:discrete)",
        "State(speaking)",
        "AgentResponse(tech:Tech support speaking, what is wrong?)",
        "State(listening)",
        "State(ended)",
    ]
    updates = [u["session"] for u in peer.received("session.update")]
    assert [u["instructions"] for u in updates] == [
        "You are the front desk.",
        "You are billing.",
        "You are the front desk.",
        "You are tech support.",
    ]
    assert [t["name"] for t in updates[1]["tools"]] == ["lookup", "to_front"]
    assert [t["name"] for t in updates[-1]["tools"]] == ["to_front"]
    # wire order of a handoff: the tool output, the new session, then the response
    types = peer.types()
    first_output = types.index("conversation.item.create")
    assert types[first_output : first_output + 3] == [
        "conversation.item.create",
        "session.update",
        "response.create",
    ]
    creates = peer.received("response.create")  # lines to say, and one after each caller turn
    lines = [c["response"]["instructions"] for c in creates if "response" in c]
    assert '"Billing here."' in lines[1] and '"Front again."' in lines[2] and len(lines) == 3
    assert "response" not in creates[-1]  # discrete: no line to say, the new agent just answers
    state = h.store.states["s1"]
    assert state.active_agent == "tech"
    assert [(x["from"], x["to"], x["type"]) for x in state.handoffs] == [
        ("front", "billing", "announced"),
        ("billing", "front", "announced"),
        ("front", "tech", "discrete"),
    ]


@pytest.mark.parametrize("kind", KINDS)
async def test_barge_in_cancels_truncates_and_drops_late_audio(kind, peer, caplog):
    caplog.set_level("DEBUG", logger="voiceagent.conversation")
    story = " ".join(f"word{i}" for i in range(40)) + "."
    peer.user_says("tell me a story", "stop")
    peer.push(Say(story, chunks=20, audio_ms=4000, interval=0.05, late_deltas=2))
    async with LiveHarness(make_client(kind, peer)) as h:
        await h.idle()
        h.speak()
        await h.until(lambda h: len([a for a in h.of("Audio") if a.response_id == 2]) >= 4)
        began = time.monotonic()
        await asyncio.sleep(0.3)  # part of the story has played
        heard_s = time.monotonic() - began
        for _ in range(4):  # the caller talks over the agent (80 ms: the resampler holds a few ms back)
            h.conv.push_audio(TONE, RATE)
        await h.until(lambda h: h.of("StopAudio"))
        stop = h.of("StopAudio")[0]
        # the cancelled response is over before the caller's next words are heard (the peer may
        # otherwise transcribe them before it reports the cancel: an order no caller can notice)
        await h.until(lambda h: h.kinds()[h.kinds().index("StopAudio") :][1:2] == ["State(listening)"])
        h.speak(speech_frames=5)
        await h.idle()
        assert h.conv.late_deltas_dropped >= 2
    assert stop.response_id == 2 and stop.reason == "barge_in"
    logged = [(r.levelname, r.getMessage()) for r in caplog.records if "barge-in" in r.getMessage()]
    assert logged == [("DEBUG", "barge-in (speech): response 2 stopped")]  # once a turn: not at INFO
    after = h.events[h.events.index(stop) :]
    assert not [e for e in after if e.kind == "Audio" and e.response_id == 2]
    assert not [e for e in after if e.kind == "AgentResponse" and e.response_id == 2]
    assert len(peer.received("response.cancel")) == 1
    (truncate,) = peer.received("conversation.item.truncate")
    assert truncate["content_index"] == 0
    assert 0.5 * heard_s * 1000 <= truncate["audio_end_ms"] <= 2000  # what played, not the 4 s produced
    types = peer.types()
    assert types.index("response.cancel") < types.index("conversation.item.truncate")
    said = [t for t in h.store.turns["s1"] if t.role == "assistant" and t.content.startswith("word0")][0]
    words = said.content.rstrip(" …").split()
    assert 1 <= len(words) < 40 and said.content.endswith("…")
    assert [t.content for t in h.store.turns["s1"] if t.role == "user"] == ["tell me a story", "stop"]
    kinds = h.kinds()
    assert kinds[kinds.index("StopAudio") :] == [
        "StopAudio",
        "State(listening)",
        "Transcript(interim:stop)",
        "Transcript(final:stop)",
        "State(thinking)",
        "State(speaking)",
        "AgentResponse(front:Okay.)",
        "State(listening)",
        "State(ended)",
    ]


@pytest.mark.parametrize("kind", KINDS)
async def test_barge_in_is_synchronous(kind, peer):
    peer.push(Say("one two three four five six", chunks=6, audio_ms=3000))
    async with LiveHarness(make_client(kind, peer)) as h:
        await h.idle()
        h.speak()
        await h.until(lambda h: h.conv.loop_time() < h.conv.playback_end and len(h.of("Audio")) > 2)
        h.conv._barge_in("test")  # what speech_started does: StopAudio is queued before this returns
        assert any(e.kind == "StopAudio" for e in h.conv.channel._items) or h.of("StopAudio")
        assert not [e for e in h.conv.channel._items if e.kind == "Audio"]
        await h.idle()


@pytest.mark.parametrize("kind", KINDS)
async def test_the_api_dropping_mid_turn_ends_the_conversation(kind, peer):
    peer.user_says("hello")
    peer.push(Drop(Say("Let me check that for you right now.", chunks=4, audio_ms=2000), after=1))
    async with LiveHarness(make_client(kind, peer)) as h:
        await h.idle()
        h.speak()
        await h.until(lambda h: h.conv.closed, timeout=5)
        await asyncio.wait_for(h._reader, 3)  # the event stream ended
    assert h.kinds()[4:] == [
        "Transcript(interim:hello)",
        "Transcript(final:hello)",
        "State(thinking)",
        "State(speaking)",
        "Error(realtime_dropped)",
        "State(ended)",
    ]
    error = h.of("Error")[0]
    assert error.recoverable is False and KEY not in error.message
    assert h.conv.close_reason == "realtime connection dropped"
    assert h.conv.push_audio(TONE, RATE) is False


@pytest.mark.parametrize("kind", KINDS)
async def test_unreachable_api_is_an_error_and_ends_quickly(kind):
    port = free_port()  # nothing listens there
    began = time.monotonic()
    async with LiveHarness(make_client(kind, port=port), connect_attempts=3, connect_backoff_s=0.05) as h:
        await asyncio.wait_for(h._reader, 3)
    assert time.monotonic() - began < 3
    assert h.kinds() == ["Error(realtime_unavailable)", "State(ended)"]
    assert h.of("Error")[0].recoverable is False
    assert h.conv.closed and h.conv.close_reason == "realtime voice API unavailable"


async def test_connect_is_retried_only_while_it_can_help(peer):
    calls = []

    class Flaky:
        name = "flaky"

        def __init__(self, real):
            self.real = real

        async def connect(self, session):
            calls.append(time.monotonic())
            if len(calls) < 3:
                from voiceagent.llm.realtime import RealtimeError

                raise RealtimeError("connection refused")
            return await self.real.connect(session)

        async def close(self):
            await self.real.close()

    async with LiveHarness(Flaky(make_client("openai", peer)), connect_backoff_s=0.05) as h:
        await h.idle()
    assert len(calls) == 3 and calls[2] - calls[1] >= calls[1] - calls[0] >= 0.04  # backoff grows
    assert "AgentResponse(front:Hello, front desk.)" in h.kinds()

    wrong = OpenAIRealtimeClient("gpt-realtime", api_key="wrong-key", base_url=peer.openai_base_url)
    began = time.monotonic()
    async with LiveHarness(wrong, connect_attempts=5, connect_backoff_s=0.5) as h:
        await asyncio.wait_for(h._reader, 3)
    assert time.monotonic() - began < 1.0  # 401 is not retried
    assert h.kinds() == ["Error(realtime_unavailable)", "State(ended)"]
    assert "401" in h.of("Error")[0].message and "wrong-key" not in h.of("Error")[0].message


@pytest.mark.parametrize("kind", KINDS)
async def test_text_dtmf_pause_resume(kind, peer):
    peer.push(Say("Typed reply."), Say("Digits reply."))
    async with LiveHarness(make_client(kind, peer)) as h:
        await h.idle()
        await h.conv.push_text("  typed question  ")
        await h.idle()
        for digit in "12#":
            h.conv.push_dtmf(digit)
        h.conv.push_dtmf("x")  # ignored
        await h.until(lambda h: "AgentResponse(front:Digits reply.)" in h.kinds())
        await h.idle()
        await h.conv.pause()
        assert h.conv.push_audio(TONE, RATE) is False
        await h.conv.resume()
        await asyncio.sleep(0.05)
    assert h.kinds()[4:] == [
        "Transcript(final:typed question)",
        "State(thinking)",
        "State(speaking)",
        "AgentResponse(front:Typed reply.)",
        "State(listening)",
        "Transcript(final:Keypad entry: 12)",
        "State(thinking)",
        "State(speaking)",
        "AgentResponse(front:Digits reply.)",
        "State(listening)",
        "State(paused)",
        "State(listening)",
        "State(ended)",
    ]
    messages = [e["item"] for e in peer.received("conversation.item.create")]
    assert [m["content"][0]["text"] for m in messages] == ["typed question", "Keypad entry: 12"]
    assert all(m["role"] == "user" and m["content"][0]["type"] == "input_text" for m in messages)
    assert "input_audio_buffer.clear" in peer.types()


@pytest.mark.parametrize("kind", KINDS)
async def test_server_errors_are_reported_and_the_conversation_goes_on(kind, peer):
    peer.user_says("first", "second")
    peer.push(Fail("server_error", "upstream hiccup"), Say("Now it works."))
    async with LiveHarness(make_client(kind, peer)) as h:
        await h.idle()
        await h.turn()
        await h.turn()
    kinds = h.kinds()
    assert kinds[kinds.index("Transcript(final:first)") :] == [
        "Transcript(final:first)",
        "State(thinking)",
        "Error(realtime_error)",
        "State(listening)",
        "Transcript(interim:second)",
        "Transcript(final:second)",
        "State(thinking)",
        "State(speaking)",
        "AgentResponse(front:Now it works.)",
        "State(listening)",
        "State(ended)",
    ]
    assert "upstream hiccup" in h.of("Error")[0].message
    assert [t.content for t in h.store.turns["s1"] if t.role == "user"] == ["first", "second"]


@pytest.mark.parametrize("kind", KINDS)
async def test_resumed_session_replays_history_and_skips_the_greeting(kind, peer):
    store = InMemorySessionStore()
    await store.save(SessionState(session_id="s1", scenario="desk", active_agent="billing"))
    store.turns["s1"] = [
        Turn(role="user", content="my invoice is wrong", agent="front"),
        Turn(role="assistant", content="Billing here.", agent="billing"),
    ]
    async with LiveHarness(make_client(kind, peer), store=store) as h:
        await asyncio.sleep(0.2)
    assert h.kinds() == ["State(listening)", "State(ended)"]
    assert peer.received("session.update")[0]["session"]["instructions"] == "You are billing."
    items = [e["item"] for e in peer.received("conversation.item.create")]
    assert [(i["role"], i["content"][0]["text"]) for i in items] == [
        ("user", "my invoice is wrong"),
        ("assistant", "Billing here."),
    ]
    expected = "text" if kind == "voicelive" else "output_text"
    assert items[1]["content"][0]["type"] == expected
    assert not peer.received("response.create")
    assert not [e for e in peer.received() if e["type"] == "error"]


async def test_agent_voice_and_silence_override_reach_the_session(peer):
    agents = [
        AgentSpec(**{**AGENTS[0].__dict__, "voice": VoiceSpec("coral"), "vad_silence_timeout_ms": 900}),
        *AGENTS[1:],
    ]
    async with LiveHarness(make_client("openai", peer), agents=agents) as h:
        await h.idle()
    session = peer.received("session.update")[0]["session"]
    assert session["audio"]["output"]["voice"] == "coral"
    assert session["audio"]["input"]["turn_detection"]["silence_duration_ms"] == 900


async def test_end_conversation_tool_closes_after_the_goodbye(peer):
    from voiceagent.conversation.engine import ENDED_BY_AGENT
    from voiceagent.conversation.tools import tool_spec_from_function

    async def end_conversation(ctx) -> dict:
        """End the call."""
        ctx.memory["conversation_ended"] = True
        return {"ended": True}

    peer.user_says("bye")
    peer.push(Call("end_conversation", {}), Say("Goodbye!"))
    client = make_client("voicelive", peer)
    h = LiveHarness(client)
    h.registry.register(tool_spec_from_function(end_conversation))
    h.directory.agents["front"] = AgentSpec(**{**AGENTS[0].__dict__, "tools": ("end_conversation",)})
    async with h:
        await h.idle()
        h.speak()
        await h.until(lambda h: h.conv.closed)
    assert h.kinds()[4:] == [
        "Transcript(interim:bye)",
        "Transcript(final:bye)",
        "State(thinking)",
        "ToolCall(end_conversation:ok)",
        "State(speaking)",
        "AgentResponse(front:Goodbye!)",
        "State(ended)",  # after the goodbye has played
    ]
    goodbye = [a for a in h.events if a.kind == "Audio"][-1]
    assert h.events[-1].ts - goodbye.ts >= 0.25  # Say() plays 300 ms of audio
    assert h.conv.close_reason == ENDED_BY_AGENT


async def test_runtime_selects_the_engine_by_mode(settings):
    from voiceagent.conversation.engine import Conversation
    from voiceagent.runtime import Runtime

    runtime = Runtime()
    with pytest.raises(ValueError, match="not one of cascade, live"):
        runtime.new_conversation_for("telepathy", "s1", "desk", transport="browser")
    client = make_client("openai", port=free_port())
    runtime.__dict__["_realtime_client"] = client
    live = runtime.new_conversation_for("live", "s1", "desk", transport="browser")
    assert isinstance(live, LiveConversation) and live.client is client
    assert live.transport == "browser" and live.config.silence_timeout_ms() == 500
    assert not isinstance(live, Conversation)
    with pytest.raises(RuntimeError, match="not started"):
        runtime.new_conversation_for("cascade", "s1", "desk", transport="browser")
    await runtime.stop_realtime()


@pytest.mark.parametrize(
    ("transport", "requested", "streaming_mode", "expected"),
    [
        ("contactcenter", None, "MEDIA", "live"),  # the bridge always runs on the realtime voice API
        ("contactcenter", "cascade", "TRANSCRIPTION", "live"),
        ("phone", None, "VOICE_LIVE", "live"),
        ("phone", None, "MEDIA", "cascade"),
        ("phone", None, "TRANSCRIPTION", "cascade"),
        ("browser", "live", "MEDIA", "live"),
        ("browser", None, "VOICE_LIVE", "cascade"),  # the phone setting does not reach the browser
        ("browser", "LIVE ", "MEDIA", "live"),
    ],
)
def test_each_transport_gets_the_engine_the_spec_gives_it(
    settings, transport, requested, streaming_mode, expected
):
    from voiceagent.config import load_config
    from voiceagent.runtime import Runtime

    settings.CONFIG = load_config({"TELEPHONY_STREAMING_MODE": streaming_mode})
    assert Runtime().conversation_mode(transport, requested) == expected


def test_unknown_transports_and_modes_are_refused(settings):
    from voiceagent.runtime import Runtime

    with pytest.raises(ValueError, match="unknown transport 'fax'"):
        Runtime().conversation_mode("fax")
    with pytest.raises(ValueError, match="not one of cascade, live"):
        Runtime().conversation_mode("browser", "telepathy")


@pytest.mark.parametrize("rate", [8000, 24000, 48000])
async def test_caller_audio_at_any_supported_rate_reaches_the_api_at_24k(rate, peer):
    peer.user_says("narrowband")
    peer.push(Say("Heard you."))
    n = rate // 50
    tone = (np.sin(np.arange(n) * 2 * np.pi * 440 / rate) * 8000).astype("<i2").tobytes()
    async with LiveHarness(make_client("openai", peer)) as h:
        await h.idle()
        for _ in range(10):
            h.conv.push_audio(tone, rate)
        for _ in range(15):
            h.conv.push_audio(bytes(n * 2), rate)
        await h.until(lambda h: "AgentResponse(front:Heard you.)" in h.kinds())

    appends = [len(base64.b64decode(a["audio"])) for a in peer.received("input_audio_buffer.append")]
    # 25 frames of 20 ms at 24 kHz; downsampling from 48 kHz keeps its filter's tail until more comes
    assert 0.9 * 25 * 960 <= sum(appends) <= 25 * 960 + 2
    assert max(appends) <= 2 * 960 and appends.count(0) == 0


async def test_tool_rounds_in_a_row_are_bounded(peer):
    peer.user_says("loop")
    peer.push(*[Call("lookup", {"account": "1"})] * 5)
    async with LiveHarness(make_client("voicelive", peer), max_tool_rounds=2) as h:
        await h.idle()
        await h.turn()
    assert h.kinds()[4:] == [
        "Transcript(interim:loop)",
        "Transcript(final:loop)",
        "State(thinking)",
        "ToolCall(lookup:ok)",
        "ToolCall(lookup:ok)",
        "Error(tool_rounds_exceeded)",
        "State(listening)",
        "State(ended)",
    ]
    outputs = [e["item"] for e in peer.received("conversation.item.create")]
    assert len(outputs) == 3 and "tool_rounds_exceeded" in outputs[-1]["output"]
    # greeting, the caller's turn, one after each executed round
    assert len(peer.received("response.create")) == 4


# --- a person takes the conversation over (issue 32): no answer while they have it, their line
# is a response the model says word for word, kept as theirs; the handback answers ---------------
@pytest.mark.parametrize("kind", KINDS)
async def test_a_person_takes_a_live_conversation_over_speaks_and_hands_it_back(kind, peer):
    peer.user_says("is anyone there")
    peer.push(Say("Welcome back, how can I help?"))
    async with LiveHarness(make_client(kind, peer)) as h:
        await h.idle()
        assert h.conv.take_over("alice").ok
        creates = len(peer.received("response.create"))
        await h.conv.push_text("I want a person")
        h.speak()  # the caller speaks: transcribed and stored, not answered
        await h.until(lambda h: any(e.text == "is anyone there" for e in h.of("Transcript") if e.final))
        await asyncio.sleep(0.3)
        assert len(peer.received("response.create")) == creates, "the agent answered during a takeover"

        assert h.conv.say("Hello, this is Alice.").ok
        await h.until(lambda h: any(e.by == "alice" and e.final for e in h.of("AgentResponse")))
        await h.idle()
        create = peer.received("response.create")[-1]
        assert '"Hello, this is Alice."' in create["response"]["instructions"]

        assert h.conv.hand_back().body["answering"] is False  # the person spoke last
        await h.conv.push_text("thanks")
        await h.until(lambda h: "AgentResponse(front:Welcome back, how can I help?)" in h.kinds())
        await h.idle()
    turns = [(t.role, t.content, t.speaker) for t in h.store.turns["s1"]]
    assert ("user", "I want a person", None) in turns and ("user", "is anyone there", None) in turns
    person = [content for role, content, speaker in turns if speaker == PERSON and role == "assistant"]
    assert person == ["Hello, this is Alice."]
    assert turns[-1] == ("assistant", "Welcome back, how can I help?", None)
    assert [(e.active, e.by) for e in h.of("Takeover")] == [(True, "alice"), (False, "alice")]
