"""Per-turn timings and usage (voiceagent.conversation.timing) in both pipelines: every assistant
turn carries ``latency_ms`` and ``usage``, the same figures arrive as a ``TurnMetrics`` event and
at the process's turn observers. No thresholds: keys, types, null where a stage did not run."""

from __future__ import annotations

import asyncio

import pytest
import test_live
from enginekit import RATE, SILENCE, TONE, Harness
from realtime_peer import Call, Say
from test_live import LiveHarness, make_client

from voiceagent.conversation import timing
from voiceagent.conversation.testing import InstantTTS
from voiceagent.conversation.timing import STAGES, USAGE_KEYS

KINDS = ["voicelive", "openai"]
peer, _clean_peer = test_live.peer, test_live._clean_peer  # the realtime peer's fixtures


def assistant_turns(store) -> list:
    """The assistant turns heard (a reply is in the store from when it is sent, "unknown" until played)."""
    return [t for t in store.turns["s1"] if t.role == "assistant" and t.heard != "unknown"]


def check_shape(turn) -> None:
    assert set(STAGES) <= set(turn.latency_ms) and {"tools", "handoff", "barge_in"} <= set(turn.latency_ms)
    assert set(turn.usage) == set(USAGE_KEYS)
    for key in STAGES:
        assert turn.latency_ms[key] is None or isinstance(turn.latency_ms[key], float)


@pytest.fixture
def reports():
    seen: list = []
    stop = timing.observe(seen.append)
    yield seen
    stop()


async def test_cascade_spoken_turn_typed_turn_and_greeting(reports):
    script = [[("lookup", {"account": "1"})], "Your balance is 42 dollars.", "Typed answer."]
    async with Harness(script=script, texts=["what is my balance"]) as h:
        await h.idle()
        h.speak()
        await h.until(lambda h: len(assistant_turns(h.store)) == 2)
        await h.idle()
        await h.conv.push_text("and now typed")
        await h.until(lambda h: len(assistant_turns(h.store)) == 3)
    greeting, spoken, typed = assistant_turns(h.store)
    for turn in (greeting, spoken, typed):
        check_shape(turn)
        assert turn.latency_ms["tts_first_audio"] is not None and turn.usage["tts_chars"] == len(turn.content)
    # the greeting: no caller turn, no model
    assert greeting.latency_ms["stt"] is greeting.latency_ms["end_to_first_audio"] is None
    assert greeting.latency_ms["llm_first_token"] is None
    # a spoken turn: every stage ran; a tool call in it
    lat = spoken.latency_ms
    assert None not in (lat["stt"], lat["llm_first_token"], lat["end_to_first_audio"])
    assert lat["end_to_first_audio"] >= lat["stt"]
    assert [t["name"] for t in lat["tools"]] == ["lookup"] and isinstance(lat["tools"][0]["ms"], float)
    assert lat["handoff"] is None and lat["barge_in"] is None
    assert spoken.usage["stt_audio_s"] > 0
    assert spoken.usage["llm_tokens_in"] is None  # the scripted model reports no usage
    # typed text: no speech stage, but measured from its arrival
    assert typed.latency_ms["stt"] is None and typed.usage["stt_audio_s"] is None
    assert (
        typed.latency_ms["end_to_first_audio"] is not None and typed.latency_ms["llm_first_token"] is not None
    )
    # the same figures as an event and to the observers
    metrics = h.of("TurnMetrics")
    assert [m.latency_ms for m in metrics] == [t.latency_ms for t in (greeting, spoken, typed)]
    assert [m.turn_index for m in metrics] == [1, 2, 3]
    assert [r.usage for r in reports if r.session_id == "s1"] == [t.usage for t in (greeting, spoken, typed)]
    assert all(t.latency_ms is None for t in h.store.turns["s1"] if t.role != "assistant")


async def test_cascade_handoff():
    async with Harness(script=[[("to_billing", {})]], texts=["billing please"]) as h:
        await h.idle()
        h.speak()
        await h.until(lambda h: len(assistant_turns(h.store)) == 2)
    greeting, handoff = assistant_turns(h.store)
    assert isinstance(handoff.latency_ms["handoff"], float) and greeting.latency_ms["handoff"] is None
    assert [t["name"] for t in handoff.latency_ms["tools"]] == ["to_billing"]


async def test_cascade_barge_in_is_timed_on_the_interrupted_turn():
    story = "Once upon a time " * 15
    texts = ["a story please", "wait a moment"]
    async with Harness(script=[story, "Yes?"], texts=texts, tts=InstantTTS(ms_per_word=40)) as h:
        await h.idle()
        h.speak()
        await h.until(lambda h: h.of("TurnMetrics") and h.conv.playback_end - h.conv.loop_time() > 1.0)
        await asyncio.sleep(0.25)  # some words are heard
        h.speak(speech_frames=20)  # the caller talks over the agent (longer than MIN_INTERRUPTION_MS)
        await h.until(lambda h: h.of("StopAudio") and len(assistant_turns(h.store)) == 2)
    # [:2]: the answer to "wait a moment" may have begun as the harness closed (then kept as "…")
    greeting, interrupted = assistant_turns(h.store)[:2]
    assert interrupted.content.endswith("…") and isinstance(interrupted.latency_ms["barge_in"], float)
    assert greeting.latency_ms["barge_in"] is None
    assert interrupted.latency_ms["end_to_first_audio"] is not None


@pytest.mark.parametrize("kind", KINDS)
async def test_live_spoken_turn_with_a_tool_call(kind, peer):
    async with LiveHarness(make_client(kind, peer)) as h:
        await h.idle()  # the greeting
        peer.user_says("what is my balance").push(Call("lookup", {"account": "1"}), Say("It is 42."))
        await h.turn()
    greeting, answer = assistant_turns(h.store)
    for turn in (greeting, answer):
        check_shape(turn)
        assert turn.latency_ms["llm_first_token"] is None and turn.latency_ms["tts_first_audio"] is None
        assert turn.usage["realtime_audio_out_s"] > 0 and turn.usage["tts_chars"] is None
        assert turn.usage["llm_tokens_in"] > 0 and turn.usage["llm_tokens_out"] > 0
    assert greeting.latency_ms["end_to_first_audio"] is None
    lat = answer.latency_ms
    assert lat["stt"] is not None and lat["end_to_first_audio"] is not None
    assert lat["end_to_first_audio"] >= lat["stt"]
    assert [t["name"] for t in lat["tools"]] == ["lookup"]
    assert answer.usage["llm_tokens_in"] == 16  # both responses of the turn (call, then answer)
    assert answer.usage["realtime_audio_in_s"] > 0 and answer.usage["stt_audio_s"] > 0
    assert [m.latency_ms for m in h.of("TurnMetrics")] == [greeting.latency_ms, answer.latency_ms]


@pytest.mark.parametrize("on_demand", [True, False])
async def test_speech_to_text_says_which_decode_it_measured(on_demand):
    """A recogniser that decodes in the caller's pause (Whisper's ``hint_pause``) has the final
    transcript before the turn ends: ``stt`` is then ~0 and ``stt_pause_decode`` is that decode;
    a final decode after the turn ended leaves ``stt_pause_decode`` null."""
    async with Harness(script=["Sure."], texts=["what is my balance"]) as h:
        h.stt.on_demand = on_demand
        await h.idle()
        for frame in [TONE] * 10 + [SILENCE] * 15:  # as a microphone: the stream opens meanwhile
            h.conv.push_audio(frame, RATE)
            await asyncio.sleep(0.002)
        await h.until(lambda h: len(assistant_turns(h.store)) == 2)
    lat = assistant_turns(h.store)[1].latency_ms
    assert isinstance(lat["stt"], float)
    if on_demand:
        assert h.stt.hints >= 1 and isinstance(lat["stt_pause_decode"], float)
    else:
        assert lat["stt_pause_decode"] is None
