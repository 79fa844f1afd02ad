"""The realtime voice API fails under a live (speech-to-speech) conversation: slowed, refusing
connections, failing a response, or cut mid-answer. The caller is told (``realtime_error``,
``realtime_unavailable``, ``realtime_dropped``), the conversation goes on - on the same socket,
reconnected with its history when the connection was lost - and every turn the caller heard is in
the history."""

from __future__ import annotations

import pytest
from fault_clients import (
    TURN_TIMEOUT_S,
    assert_in_history,
    history,
    is_error,
    open_caller,
    send,
    type_turn,
    wait_turn,
)
from fault_wires import REALTIME_ANSWER
from realtime_peer import Fail, Say

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.usefixtures("clean_log")]

GREETING = "Hi, thanks for calling. How can I help?"


async def start(service):
    caller = await open_caller(service, mode="live")
    await wait_turn(caller, 0)  # the greeting (said by the realtime peer), heard out
    return caller


async def test_a_slow_realtime_api_still_answers_every_turn(service, faults):
    caller = await start(service)
    try:
        faults.realtime_proxy.latency(400)
        slow = await type_turn(caller, "what is my balance")
        assert slow.answers == [REALTIME_ANSWER] and not slow.errors, slow
        faults.realtime_proxy.reset()
        fine = await type_turn(caller, "thanks")
        assert fine.answers == [REALTIME_ANSWER] and not fine.errors, fine
        await assert_in_history(
            service,
            caller.session_id,
            [
                ("assistant", GREETING),
                ("user", "what is my balance"),
                ("assistant", REALTIME_ANSWER),
                ("user", "thanks"),
                ("assistant", REALTIME_ANSWER),
            ],
        )
    finally:
        await caller.close()


async def test_a_failed_realtime_response_is_reported_and_the_next_turn_is_fine(service, faults):
    caller = await start(service)
    try:
        faults.realtime.push(Fail(message="The server had an error while processing your request."))
        failed = await type_turn(caller, "what is my balance", answered=False)
        assert failed.codes == ["realtime_error"] and "server had an error" in failed.errors[0]["message"]
        assert not failed.answers
        fine = await type_turn(caller, "are you there")
        assert fine.answers == [REALTIME_ANSWER] and not fine.errors, fine
        await assert_in_history(
            service,
            caller.session_id,
            [("user", "what is my balance"), ("user", "are you there"), ("assistant", REALTIME_ANSWER)],
        )
    finally:
        await caller.close()


async def test_a_realtime_api_refusing_connections_is_reported_and_the_caller_goes_on_once_it_is_back(
    service, faults
):
    faults.realtime_proxy.down()
    caller = await open_caller(service, mode="live")
    try:
        i = await caller.inbox.wait(is_error, timeout=TURN_TIMEOUT_S)
        error = caller.inbox.messages[i]["payload"]
        assert error["code"] == "realtime_unavailable", error
        assert caller.inbox.closed is None  # the socket stays: the caller may try again

        faults.realtime_proxy.reset()
        start_at = len(caller.inbox.messages)
        await send(caller, "control", {"action": "start"})  # the caller tries again: it starts over
        await wait_turn(caller, start_at)  # the greeting
        fine = await type_turn(caller, "hello again")
        assert fine.answers == [REALTIME_ANSWER] and not fine.errors, fine
        await assert_in_history(
            service,
            caller.session_id,
            [("assistant", GREETING), ("user", "hello again"), ("assistant", REALTIME_ANSWER)],
        )
    finally:
        await caller.close()


async def test_a_realtime_connection_cut_mid_answer_is_reported_and_the_conversation_resumes(service, faults):
    long = "Your balance is four hundred and twelve dollars, and your last payment arrived on Monday."
    caller = await start(service)
    try:
        faults.realtime.push(Say(long, chunks=8, audio_ms=4000, interval=0.3))
        start_at = len(caller.inbox.messages)
        await send(caller, "text", {"text": "what is my balance"})
        await caller.inbox.wait(lambda m: m.get("type") == "audio", start_at)  # the answer is playing
        assert faults.realtime_proxy.cut() >= 1
        i = await caller.inbox.wait(is_error, start_at)
        error = caller.inbox.messages[i]["payload"]
        assert error["code"] == "realtime_dropped", error
        assert caller.inbox.closed is None  # the socket stays

        fine = await type_turn(caller, "sorry, say that again")
        assert fine.answers == [REALTIME_ANSWER], fine
        turns = await assert_in_history(
            service,
            caller.session_id,
            [
                ("assistant", GREETING),
                ("user", "what is my balance"),
                ("user", "sorry, say that again"),
                ("assistant", REALTIME_ANSWER),
            ],
        )
        cut = [t["content"] for t in turns if t["role"] == "assistant" and t["content"].endswith("…")]
        for heard in cut:  # what was heard of the cut answer, if a word was: its start, marked cut
            assert long.startswith(heard.rstrip(" …")), heard
        assert len(faults.realtime.connections) >= 2  # the conversation reconnected
        # the new connection got the earlier conversation (the history replayed as items)
        replayed = [
            e for e in faults.realtime.received("conversation.item.create") if e["item"].get("role") == "user"
        ]
        assert any("what is my balance" in str(e["item"]) for e in replayed), replayed
        assert (await history(service, caller.session_id))[0]["role"] == "assistant"
    finally:
        await caller.close()
