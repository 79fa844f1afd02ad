"""The remote targets' rules without a service: where they connect, how the phone stream's
``?events=1`` names become the envelope, when a turn is over, and a turn that gets no answer."""

from __future__ import annotations

import asyncio

import pytest

from agents_app.evals.remote.base import NoAnswer, RemoteTarget, TargetError, base_urls
from agents_app.evals.remote.phone import envelope_of


@pytest.mark.parametrize(
    "url, http, ws",
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/api/v1", "ws://127.0.0.1:8000/api/v1"),
        ("https://agents.example/api/v1/", "https://agents.example/api/v1", "wss://agents.example/api/v1"),
        ("http://host/prefix", "http://host/prefix/api/v1", "ws://host/prefix/api/v1"),
    ],
)
def test_the_service_url_gives_the_rest_and_socket_bases(url, http, ws):
    assert base_urls(url) == (http, ws)


def test_a_url_that_is_no_service_is_refused_with_the_reason():
    with pytest.raises(TargetError, match="http"):
        base_urls("127.0.0.1:8000")


def test_the_phone_streams_events_become_the_envelope():
    tool = {"name": "block_card", "args": {"card_last4": "1"}, "result": {"ok": 1}, "ok": True, "agent": "a"}
    assert envelope_of({"type": "tool_call", "payload": tool})["payload"] == {
        "name": "tool_call",
        "tool": "block_card",
        "args": {"card_last4": "1"},
        "result": {"ok": 1},
        "ok": True,
        "agent": "a",
    }
    handoff = {"from": "a", "to": "b", "type": "discrete", "tool": "handoff_b"}
    assert envelope_of({"type": "handoff", "payload": handoff})["payload"] == {"name": "handoff", **handoff}
    said = envelope_of({"type": "agent_response", "payload": {"text": "Hi", "agent": "a", "final": True}})
    assert said["type"] == "response" and said["payload"]["final"] is True
    assert envelope_of({"kind": "AudioData"}) is None


def state(name: str) -> dict:
    return {"type": "event", "payload": {"name": "state", "state": name, "agent": "a"}}


def reply(text: str) -> dict:
    return {"type": "response", "payload": {"text": text, "agent": "a", "final": True}}


def tool_call() -> dict:
    return {"type": "event", "payload": {"name": "tool_call", "tool": "t", "args": {}, "ok": True}}


async def test_a_turn_is_over_when_the_agent_answered_and_listens_again():
    target = RemoteTarget("http://127.0.0.1:9")
    for message in (state("thinking"), reply("One moment."), tool_call(), state("listening")):
        target.received(message)
    assert not target._over(0)  # the tool's answer is still to come
    for message in (state("thinking"), reply("Done."), state("listening")):
        target.received(message)
    obs = await target.wait_answer(0, timeout=5)
    assert obs.reply == "One moment. Done." and [c["name"] for c in obs.tool_calls] == ["t"]
    assert not obs.errors


async def test_a_turn_waits_for_the_agents_audio_to_play():
    target = RemoteTarget("http://127.0.0.1:9")
    target.received(reply("Hello."))
    target.received(state("listening"))
    target.heard_audio(0.4)
    loop = asyncio.get_running_loop()
    began = loop.time()
    await target.wait_answer(0, timeout=5)
    assert loop.time() - began >= 0.4


async def test_a_turn_without_an_answer_is_an_error_not_a_hang():
    target = RemoteTarget("http://127.0.0.1:9")
    target.received({"type": "transcript", "payload": {"text": "hello", "final": True, "speaker": "user"}})
    target.received(state("thinking"))
    with pytest.raises(NoAnswer) as raised:
        await target.wait_answer(0, timeout=0.2)
    assert str(raised.value) == (
        "error: no answer within 0.2 s (heard 'hello'; no final response; last state thinking)"
    )


async def test_a_closed_conversation_ends_the_turn():
    target = RemoteTarget("http://127.0.0.1:9")
    target.lost("closed 1000 the agent ended the call")
    obs = await target.wait_answer(0, timeout=5)
    assert obs.ended and not obs.errors


@pytest.mark.parametrize("name", ["BrowserTarget", "PhoneTarget"])
async def test_session_variables_skip_a_test_where_no_wire_carries_them(name):
    from agents_app.evals import remote_targets
    from agents_app.evals.runner import Skipped

    target = getattr(remote_targets, name)("http://127.0.0.1:9", "key")
    with pytest.raises(Skipped, match="channel"):
        await target.open("banking", seed=None, variables={"channel": "web"})
