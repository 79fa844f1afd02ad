"""The cascade engine end to end with instant scripted providers: exact event sequences."""

from __future__ import annotations

import asyncio

import pytest
from enginekit import AGENTS, RATE, SILENCE, TONE, Harness

from voiceagent.conversation.ducking import BACKCHANNEL_MAX_MS, DUCK_AFTER_MS, DUCK_GAIN_DB
from voiceagent.conversation.providers import ChatChunk, ProviderError
from voiceagent.conversation.specs import AgentSpec
from voiceagent.conversation.testing import InstantTTS


async def turn(h: Harness, *, frames: int = 10) -> None:
    h.speak(speech_frames=frames)
    await asyncio.sleep(0.01)
    await h.idle()


async def test_whole_conversation_exact_sequence():
    script = [
        [("lookup", {"account": "123"})],  # turn 1: a tool call...
        "Your balance is 42 dollars.",  # ...then the answer using its result
        [("to_billing", {"reason": "invoice"})],  # turn 2: announced handoff to billing
        [("to_front", {})],  # turn 3: billing hands back, announced (return greeting)
        [("to_tech", {})],  # turn 4: discrete handoff...
        "Tech support speaking, what is wrong?",  # ...the new agent answers in the same turn
    ]
    texts = ["what is my balance", "i have a billing question", "go back", "my internet is down"]
    async with Harness(script=script, texts=texts) as h:
        await h.idle()
        for _ in texts:
            await turn(h)
    assert h.kinds() == [
        "State(listening)",
        "State(speaking)",
        "AgentResponse(front:Hello, front desk.)",
        "State(listening)",
        # turn 1
        "Transcript(interim:what)",
        "Transcript(final:what is my balance)",
        "State(thinking)",
        "ToolCall(lookup:ok)",
        "State(speaking)",
        "AgentResponse(front:Your balance is 42 dollars.)",
        "State(listening)",
        # turn 2: announced
        "Transcript(interim:i)",
        "Transcript(final:i have a billing question)",
        "State(thinking)",
        "ToolCall(to_billing:ok)",
        "Handoff(front->billing:announced)",
        "State(speaking)",
        "AgentResponse(billing:Billing here.)",
        "State(listening)",
        # turn 3: back to the entry agent: its return greeting
        "Transcript(interim:go)",
        "Transcript(final:go back)",
        "State(thinking)",
        "ToolCall(to_front:ok)",
        "Handoff(billing->front:announced)",
        "State(speaking)",
        "AgentResponse(front:Front again.)",
        "State(listening)",
        # turn 4: discrete: no announcement, tech answers under its own prompt
        "Transcript(interim:my)",
        "Transcript(final:my internet is down)",
        "State(thinking)",
        "ToolCall(to_tech:ok)",
        "Handoff(front->tech:discrete)",
        "State(speaking)",
        "AgentResponse(tech:Tech support speaking, what is wrong?)",
        "State(listening)",
        "State(ended)",
    ]
    tool = h.of("ToolCall")[0]
    assert tool.arguments == {"account": "123"} and tool.result == {"account": "123", "balance": 42.5}
    # the tool result was fed back to the model, and the discrete target's prompt and tools were used
    round2 = h.chat.requests[1].messages
    assert round2[-1]["role"] == "tool" and '"balance": 42.5' in round2[-1]["content"]
    last = h.chat.requests[-1]
    assert last.messages[0]["content"] == "You are tech support." and last.agent == "tech"
    assert [t["function"]["name"] for t in last.tools] == ["to_front"]
    # history: what the caller said and heard, plus the tool results, in order
    history = [(t.role, t.content if t.role != "tool" else t.tool_name) for t in h.store.turns["s1"]]
    assert history[:5] == [
        ("assistant", "Hello, front desk."),
        ("user", "what is my balance"),
        ("tool", "lookup"),
        ("assistant", "Your balance is 42 dollars."),
        ("user", "i have a billing question"),
    ]
    state = h.store.states["s1"]
    assert state.active_agent == "tech"
    assert [(x["from"], x["to"], x["type"]) for x in state.handoffs] == [
        ("front", "billing", "announced"),
        ("billing", "front", "announced"),
        ("front", "tech", "discrete"),
    ]


async def test_first_audio_leaves_before_the_llm_finishes():
    class SlowTail:
        name = "slow"
        requests: list = []

        async def stream(self, request):
            yield ChatChunk(text="Sure thing. ")
            await asyncio.sleep(0.3)
            yield ChatChunk(text="Here is the rest of a long answer.")
            yield ChatChunk(done=True)

    async with Harness(texts=["hi"]) as h:
        await h.idle()
        h.conv.chat = SlowTail()
        started = len(h.events)
        h.speak()
        await h.until(lambda h: any(e.kind == "Audio" for e in h.events[started:]))
        assert not any(e.kind == "AgentResponse" and e.final for e in h.events[started:])  # LLM still going
        await h.idle()


async def test_barge_in_stops_audio_and_keeps_what_was_said():
    long_reply = " ".join(f"word{i}" for i in range(60)) + "."
    tts = InstantTTS(ms_per_word=50, chunk_ms=50)
    async with Harness(script=[long_reply], texts=["tell me a story", "stop"], tts=tts) as h:
        await h.idle()
        h.speak()
        await h.until(lambda h: len(h.of("Audio")) > 5 and h.conv.loop_time() < h.conv.playback_end)
        await asyncio.sleep(0.3)  # part of the answer has played
        stop_index = len(h.events)
        h.conv.push_audio(TONE, 16000)  # the caller talks over the agent
        await h.until(lambda h: h.of("StopAudio"))
        stop = h.of("StopAudio")[0]
        h.speak(speech_frames=5)
        await h.idle()
    after = h.events[h.events.index(stop) :]
    assert not [e for e in after if e.kind == "Audio" and e.response_id == stop.response_id]
    assert stop_index <= h.events.index(stop)
    said = [t for t in h.store.turns["s1"] if t.role == "assistant" and t.content.startswith("word0")][0]
    words = said.content.rstrip(" …").split()
    assert 2 <= len(words) < 60 and said.content.endswith("…")  # truncated at what was played
    assert [t.content for t in h.store.turns["s1"] if t.role == "user"] == ["tell me a story", "stop"]


async def test_barge_in_during_the_first_clause_still_keeps_the_turn_the_caller_heard():
    """A streaming TTS (real time) is still synthesising the answer's only clause when the caller
    cuts in: the clause is not yet among the spoken ones, but its start was heard."""
    long_clause = " ".join(f"word{i}" for i in range(60)) + "."
    tts = InstantTTS(ms_per_word=100, chunk_ms=100, delay_s=0.1)
    async with Harness(script=[long_clause], texts=["tell me a story", "stop"], tts=tts) as h:
        await h.idle()
        started = len(h.events)
        h.speak()
        await h.until(lambda h: len([e for e in h.events[started:] if e.kind == "Audio"]) >= 3)
        h.conv.push_audio(TONE, 16000)  # the caller talks over the agent
        await h.until(lambda h: h.of("StopAudio"))
        h.speak(speech_frames=5)
        await h.idle()
    turns = [(t.role, t.content) for t in h.store.turns["s1"]][1:]  # after the greeting
    assert turns[:3] == [("user", "tell me a story"), ("assistant", "…"), ("user", "stop")]


async def test_a_first_clause_cut_mid_synthesis_keeps_the_words_heard_at_the_voices_pace():
    """The clause being synthesised when the caller cuts in has no known length yet; its heard
    words are estimated at the pace the voice kept on the clauses it played (here 100 ms a word),
    never past the audio emitted, and the turn ends with an ellipsis."""
    warmup = " ".join(f"word{i}" for i in range(10, 30)) + "."  # 2 s: the pace is measured
    story = " ".join(f"word{i}" for i in range(30, 90)) + "."
    tts = InstantTTS(ms_per_word=100, chunk_ms=100, delay_s=0.1)  # streams in real time
    async with Harness(script=[warmup, story], texts=["hello", "tell me a story", "stop"], tts=tts) as h:
        await h.idle(timeout=10)
        h.speak()
        await asyncio.sleep(0.01)
        await h.idle(timeout=10)
        started = len(h.events)
        h.speak()
        await h.until(lambda h: len([e for e in h.events[started:] if e.kind == "Audio"]) >= 12, 10)
        h.conv.push_audio(TONE, 16000)  # the caller talks over the agent, ~1.1 s into the story
        await h.until(lambda h: h.of("StopAudio"))
        h.speak(speech_frames=5)
        await h.idle(timeout=10)
    turns = [(t.role, t.content) for t in h.store.turns["s1"]][1:]  # after the greeting
    assert [role for role, _ in turns[:5]] == ["user", "assistant", "user", "assistant", "user"]
    assert turns[1][1] == warmup
    heard = turns[3][1]
    assert heard.startswith("word30 word31 word32 ") and heard.endswith(" …"), heard
    assert 6 <= len(heard.split()) - 1 <= 14, heard  # ~11 words played, at 100 ms each


async def test_barge_in_is_synchronous_with_the_frame():
    tts = InstantTTS(ms_per_word=200, chunk_ms=20)
    async with Harness(script=["one two three four five six"], texts=["go"], tts=tts) as h:
        await h.idle()
        h.speak()
        await h.until(lambda h: h.of("Audio") and h.conv.loop_time() < h.conv.playback_end)
        await asyncio.sleep(0.05)
        minimum = h.conv.turn_taking_for(None).min_interruption_ms
        needed = min(DUCK_AFTER_MS, minimum) // 20  # the speech that ducks the agent (no words known)
        queued = lambda kind: [e for e in [*h.conv.channel._items, *h.events] if e.kind == kind]  # noqa: E731
        for _ in range(needed - 1):
            h.conv._on_frame(TONE)
        assert not queued("Duck") and not queued("StopAudio")
        h.conv._on_frame(TONE)  # the very frame: the agent is ducked before this call returns
        assert [e.gain_db for e in queued("Duck")] == [DUCK_GAIN_DB] and not queued("StopAudio")
        # no words known (this recogniser gives no hypothesis on demand): speech over the agent
        # as long as no backchannel is stops it, in the frame that reaches that length
        for _ in range((BACKCHANNEL_MAX_MS - needed * 20) // 20 - 1):
            h.conv._on_frame(TONE)
        assert not queued("StopAudio")
        h.conv._on_frame(TONE)
        assert queued("StopAudio")
        h.speak(speech_frames=0)
        await h.idle()


async def test_llm_error_speaks_fallback_and_conversation_goes_on():
    async with Harness(
        script=[ProviderError("502 from upstream"), "Now it works."], texts=["hi", "again"]
    ) as h:
        await h.idle()
        await turn(h)
        await turn(h)
    kinds = h.kinds()
    fallback = h.conv.config.fallback_line
    assert kinds[kinds.index("Transcript(final:hi)") : kinds.index("Transcript(final:hi)") + 5] == [
        "Transcript(final:hi)",
        "State(thinking)",
        "Error(llm_error)",
        f"AgentResponse(front:{fallback})",
        "State(listening)",
    ]
    assert "AgentResponse(front:Now it works.)" in kinds
    assert fallback in h.tts.spoken
    assert [t.content for t in h.store.turns["s1"] if t.role == "user"] == ["hi", "again"]  # nothing lost


async def test_llm_timeout_speaks_fallback():
    async with Harness(script=[5.0], texts=["hello"], llm_timeout_s=0.1) as h:
        await h.idle()
        await turn(h)
    errors = h.of("Error")
    assert errors and errors[0].code == "llm_error" and "timed out" in errors[0].message


async def test_tts_failure_still_sends_text():
    async with Harness(script=["Here is your answer."], texts=["question"], tts=InstantTTS(fail=True)) as h:
        await h.idle()
        await turn(h)
    assert "AgentResponse(front:Here is your answer.)" in h.kinds()
    assert "Error(tts_error)" in h.kinds()
    assert not h.of("Audio")


async def test_tts_failure_tells_the_client_no_exception_text():
    """The provider's reason (a voice file, a package, a host) goes to the log, not the caller."""
    async with Harness(script=["Here is your answer."], texts=["question"], tts=InstantTTS(fail=True)) as h:
        await h.idle()
        await turn(h)
    errors = h.of("Error")
    assert errors and {(e.code, e.message) for e in errors} == {("tts_error", "speech synthesis failed")}


async def test_stt_failure_reports_and_recovers_on_next_audio():
    async with Harness(script=["Got it."], texts=["second try"]) as h:
        await h.idle()
        h.stt.fail_open = 1
        await turn(h)
        assert "Error(stt_error)" in h.kinds()
        await turn(h)
    assert "Transcript(final:second try)" in h.kinds()
    assert "AgentResponse(front:Got it.)" in h.kinds()


async def test_bad_tool_arguments_and_unoffered_tools_become_error_results():
    script = [[("lookup", {"acct": 1}), ("delete_everything", {})], "Sorry about that."]
    async with Harness(script=script, texts=["do it"]) as h:
        await h.idle()
        await turn(h)
    calls = h.of("ToolCall")
    assert [(c.name, c.ok) for c in calls] == [("lookup", False), ("delete_everything", False)]
    assert calls[0].result["error"]["type"] == "validation_error"
    assert calls[1].result["error"]["type"] == "unknown_tool"
    assert "AgentResponse(front:Sorry about that.)" in h.kinds()


async def test_tool_rounds_are_bounded():
    loop_forever = [[("lookup", {"account": "1"})]] * 10
    async with Harness(script=loop_forever, texts=["loop"], max_tool_rounds=3) as h:
        await h.idle()
        await turn(h)
    assert len(h.of("ToolCall")) == 3
    assert "Error(tool_rounds_exceeded)" in h.kinds()


async def test_text_dtmf_pause_resume():
    async with Harness(script=["Typed reply.", "Digits reply."], texts=[]) as h:
        await h.idle()
        await h.conv.push_text("  typed question  ")
        await h.idle()
        for digit in "12#":
            h.conv.push_dtmf(digit)
        h.conv.push_dtmf("x")  # ignored
        await h.until(lambda h: "Transcript(final:Keypad entry: 12)" in h.kinds())
        await h.idle()
        await h.conv.pause()
        assert h.conv.push_audio(TONE) is False
        await h.conv.resume()
    kinds = h.kinds()
    assert "Transcript(final:typed question)" in kinds and "AgentResponse(front:Typed reply.)" in kinds
    assert "AgentResponse(front:Digits reply.)" in kinds
    assert kinds[-3:] == ["State(paused)", "State(listening)", "State(ended)"]


async def test_live_agent_changes_apply_from_the_next_turn():
    async with Harness(script=["One.", "Two."], texts=["a", "b"]) as h:
        await h.idle()
        await turn(h)
        assert h.chat.requests[-1].temperature is None
        front = h.directory.agents["front"]
        h.directory.agents["front"] = AgentSpec(**{**front.__dict__, "temperature": 0.1})
        await turn(h)
    assert h.chat.requests[-1].temperature == 0.1


async def test_audio_before_start_is_kept_bounded_and_processed_at_start():
    h = Harness(texts=["early words"], input_queue_frames=20)
    h.speak(speech_frames=5, silence_frames=14)  # the caller speaks while the session is still opening
    assert h.conv._utterance is None  # nothing is processed before start()
    async with h:
        await h.until(lambda h: any(e.kind == "Transcript" and e.final for e in h.events))
    assert h.conv.dropped_frames == 0
    overflow = Harness(input_queue_frames=20)
    for _ in range(60):
        overflow.conv.push_audio(SILENCE, RATE)
    async with overflow:
        await asyncio.sleep(0.02)
    assert overflow.conv.dropped_frames == 40
    assert "Error(input_overflow)" in overflow.kinds()


async def test_audio_is_processed_as_it_is_pushed_without_a_task_hop():
    """At hundreds of conversations a queue and a task wake-up per 20 ms frame cost loop time:
    a frame pushed is through VAD and in the utterance before push_audio returns."""
    async with Harness(texts=["x"]) as h:
        await h.idle()
        h.conv.push_audio(TONE, RATE)
        assert h.conv._utterance is not None and h.conv._utterance.frames_in >= 1


async def test_resampled_input_rates():
    import numpy as np

    tone8k = (np.sin(np.arange(160) * 2 * np.pi * 440 / 8000) * 8000).astype("<i2").tobytes()
    async with Harness(script=["Heard you."], texts=["narrowband"]) as h:
        await h.idle()
        for _ in range(20):
            h.conv.push_audio(tone8k, 8000)
        for _ in range(20):
            h.conv.push_audio(bytes(320), 8000)
        await h.until(lambda h: "AgentResponse(front:Heard you.)" in h.kinds())


async def test_end_conversation_closes():
    from voiceagent.conversation.tools import tool_spec_from_function

    async def end_conversation(ctx) -> dict:
        """End the call."""
        ctx.memory["conversation_ended"] = True
        return {"ended": True}

    async with Harness(script=[[("end_conversation", {})], "Goodbye!"], texts=["bye"]) as h:
        h.registry.register(tool_spec_from_function(end_conversation))
        h.directory.agents["front"] = AgentSpec(**{**AGENTS[0].__dict__, "tools": ("end_conversation",)})
        await h.idle()
        h.speak()
        await h.until(lambda h: h.conv.closed)
    assert h.kinds()[-2:] == ["AgentResponse(front:Goodbye!)", "State(ended)"]


@pytest.mark.parametrize("bad", [b"", b"\x00"])
async def test_odd_input_is_harmless(bad):
    async with Harness() as h:
        await h.idle()
        h.conv.push_audio(bad, 16000)
        await h.conv.push_text("   ")
        await asyncio.sleep(0.02)
        assert h.conv.closed is False


async def test_end_conversation_closes_with_a_store_that_really_awaits():
    """close() runs inside the response task: it must not cancel itself half way (regression)."""
    from voiceagent.conversation.session import InMemorySessionStore
    from voiceagent.conversation.tools import tool_spec_from_function

    class AwaitingStore(InMemorySessionStore):
        async def save(self, state):
            await asyncio.sleep(0)
            await super().save(state)

    async def end_conversation(ctx) -> dict:
        """End the call."""
        ctx.memory["conversation_ended"] = True
        return {"ended": True}

    h = Harness(script=[[("end_conversation", {})], "Goodbye!"], texts=["bye"])
    h.conv.store = h.store = AwaitingStore()
    async with h:
        h.registry.register(tool_spec_from_function(end_conversation))
        h.directory.agents["front"] = AgentSpec(**{**AGENTS[0].__dict__, "tools": ("end_conversation",)})
        await h.idle()
        h.speak()
        await h.until(lambda h: h.conv.closed and h.conv.channel.closed)
    assert h.kinds()[-1] == "State(ended)"


async def test_an_answer_that_played_out_is_in_the_history_before_the_next_turn():
    """The caller's next turn arrives in the instant the agent's audio ends, before the commit of
    what it said has run: the agent's words still come first in the history."""
    tts = InstantTTS(ms_per_word=200, chunk_ms=20)
    async with Harness(script=["Fine."], texts=[], tts=tts) as h:
        await h.until(lambda h: h.of("AgentResponse") and h.conv._pending is not None)
        h.conv.playback_end = h.conv.loop_time()  # the greeting has just played out
        await h.conv.push_text("hello")
        await h.idle()
    roles = [(t.role, t.content) for t in h.store.turns["s1"]][:2]
    assert roles == [("assistant", "Hello, front desk."), ("user", "hello")]


async def test_closing_cancels_a_speaker_still_waiting_for_its_synthesis():
    """A conversation that ends while its answer is being synthesised takes its speaker with it: a
    synthesis task left waiting on its provider outlived the call and was destroyed pending when
    the server stopped ("Task was destroyed but it is pending", tts-N)."""
    slow = InstantTTS(ms_per_word=20, chunk_ms=20, delay_s=30.0)
    h = Harness(tts=slow)
    start = asyncio.get_running_loop().create_task(h.conv.start())  # the greeting waits on the TTS
    await asyncio.sleep(0.1)
    speaker = h.conv._speaker
    assert speaker is not None and not speaker.task.done()
    await h.conv.close()
    await asyncio.sleep(0)
    assert speaker.task.done()
    await asyncio.wait_for(start, 5)


async def test_a_client_that_played_everything_leaves_no_echo_to_hide_the_callers_words():
    """A client that says it has played all the agent's audio (``control played``, the instant test
    client) hears no more of it, so no echo of it can come back: the caller's words right after are
    the caller's, even 12 dB below the agent's loudest. The echo gate kept expecting the rest of the
    greeting on the playback clock and took them for its echo: the engine-target eval heard "Can I
    talk to a real person?" as "Can I talk to a real" (its quieter last word gated away)."""
    loud = InstantTTS(ms_per_word=1000, chunk_ms=20, level=30000)  # 3 s of greeting at ~ -3 dBFS
    async with Harness(script=["Sure."], texts=["a real person"], tts=loud) as h:
        await h.until(lambda h: h.conv._pending is not None)  # the whole greeting is queued to play
        assert h.conv.loop_time() < h.conv.playback_end - 1.0
        h.conv.played_out()
        h.speak(speech_frames=15)  # TONE: ~ -15 dBFS
        await h.until(lambda h: h.of("Transcript"))
    assert "Transcript(final:a real person)" in h.kinds()
