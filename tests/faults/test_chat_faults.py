"""The chat model fails under a conversation (cascade mode): slowed past ``LLM_TIMEOUT``, hanging,
answering HTTP 500s, or cut mid-stream. Each time the caller hears the fallback line with a clear
``llm_error``, the next turn is answered normally once the model is healthy, and every turn the
caller heard is in the history."""

from __future__ import annotations

import pytest
from clients import is_type
from fault_clients import FALLBACK, assert_in_history, open_caller, send, type_turn, wait_turn
from fault_wires import LLM_TIMEOUT_S
from openai_peer import Text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.usefixtures("clean_log")]

GREETING = "Hi, thanks for calling. How can I help?"
ANSWER = "We are open from nine to five on weekdays."


async def start(service):
    caller = await open_caller(service)
    await wait_turn(caller, 0)  # the greeting, heard out
    return caller


@pytest.mark.parametrize("fault", ["latency", "blackhole"])
async def test_a_slow_or_hanging_chat_model_gets_the_fallback_then_the_next_turn_is_fine(
    service, faults, fault
):
    caller = await start(service)
    try:
        if fault == "latency":
            faults.chat_proxy.latency((LLM_TIMEOUT_S + 2) * 1000)
        else:
            faults.chat_proxy.blackhole()
        slow = await type_turn(caller, "what are your opening hours")
        assert slow.answers == [FALLBACK], slow
        assert slow.codes == ["llm_error"] and "timed out" in slow.errors[0]["message"], slow.errors
        assert slow.audio_s > 0  # the fallback is spoken, not only shown

        faults.chat_proxy.reset()
        faults.chat.push(Text(ANSWER))
        fine = await type_turn(caller, "and on saturday")
        assert fine.answers == [ANSWER] and not fine.errors, fine

        await assert_in_history(
            service,
            caller.session_id,
            [
                ("assistant", GREETING),
                ("user", "what are your opening hours"),
                ("assistant", FALLBACK),
                ("user", "and on saturday"),
                ("assistant", ANSWER),
            ],
        )
    finally:
        await caller.close()


async def test_a_chat_model_answering_http_500_gets_the_fallback_then_the_next_turn_is_fine(service, faults):
    caller = await start(service)
    try:
        faults.chat.fail(500)
        failed = await type_turn(caller, "can you hear me")
        assert failed.answers == [FALLBACK], failed
        assert failed.codes == ["llm_error"] and "HTTP 500" in failed.errors[0]["message"], failed.errors
        assert len(faults.chat.chat_requests()) >= 2  # the client retried once before giving up

        faults.chat.heal()
        faults.chat.push(Text(ANSWER))
        fine = await type_turn(caller, "are you there now")
        assert fine.answers == [ANSWER] and not fine.errors, fine

        await assert_in_history(
            service,
            caller.session_id,
            [
                ("user", "can you hear me"),
                ("assistant", FALLBACK),
                ("user", "are you there now"),
                ("assistant", ANSWER),
            ],
        )
    finally:
        await caller.close()


async def test_a_chat_stream_cut_mid_answer_ends_in_the_fallback_and_history_keeps_what_was_said(
    service, faults
):
    long = "Your card is blocked now. A new one is on its way, and it should arrive within five days."
    faults.chat.push(Text(long, chunks=8, chunk_delay=0.25))
    caller = await start(service)
    try:
        start_at = len(caller.inbox.messages)
        await send(caller, "text", {"text": "i lost my card"})
        await caller.inbox.wait(is_type("response", final=False), start_at)  # the answer is streaming
        assert faults.chat_proxy.cut() >= 1
        await wait_turn(caller, start_at)
        reply = [m for m in caller.inbox.messages[start_at:] if m["type"] in ("response", "error")]
        finals = [m["payload"]["text"] for m in reply if is_type("response", final=True)(m)]
        errors = [m["payload"] for m in reply if m["type"] == "error"]
        streamed = "".join(m["payload"]["text"] for m in reply if is_type("response", final=False)(m))
        assert finals == [FALLBACK], reply
        assert [e["code"] for e in errors] == ["llm_error"], errors
        assert streamed and long.startswith(streamed.strip()) and streamed.strip() != long, streamed

        faults.chat.push(Text(ANSWER))
        fine = await type_turn(caller, "thank you")
        assert fine.answers == [ANSWER] and not fine.errors, fine

        turns = await assert_in_history(
            service,
            caller.session_id,
            [
                ("user", "i lost my card"),
                ("assistant", FALLBACK),
                ("user", "thank you"),
                ("assistant", ANSWER),
            ],
        )
        cut = next(t["content"] for t in turns if FALLBACK in t["content"])
        spoken = cut[: cut.index(FALLBACK)].strip()
        assert long.startswith(spoken), (spoken, long)  # what was spoken before the cut, then the fallback
    finally:
        await caller.close()
