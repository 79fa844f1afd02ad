"""Keypad (DTMF) entries end to end over the browser socket and the phone media stream: the banking
scenario's auth agent on the offline dialog (``offline-rules``) and the built-in tools, a demo
caller profile made through ``POST /api/v1/profiles/generate``; the one-time code typed on the
keypad verifies the caller like a spoken one, a wrong one is refused like a wrong spoken one."""

from __future__ import annotations

import asyncio
import json

import pytest
from acs_media_client import AcsMediaClient, over_communicator
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from agents_app.builtin_tools import expected_mfa_code
from voiceagent.conversation.testing import ScriptedSTT
from voiceagent.llm.rules import RulesChat
from voiceagent.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)
APP = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
BROWSER = "/api/v1/browser/conversation"
WRONG = "000000"


async def profile_for(api_client, session_id: str, seed: int = 7) -> dict:
    """The session's demo caller, as the web page makes one (the session is created if new)."""
    response = await asyncio.to_thread(
        api_client.post,
        "/api/v1/profiles/generate",
        {"seed": seed, "scenario": "banking", "session_id": session_id},
        format="json",
    )
    assert response.status_code == 201, response.content
    return response.json()


async def remembered(session_id: str, key: str) -> object:
    """``memory[key]`` of the stored session once the turn that set it was saved (off the socket path)."""
    from agents_app import sessions

    value = None
    for _ in range(50):
        value = (await sessions.db_call(sessions.load_state, session_id)).memory.get(key)
        if value:
            return value
        await asyncio.sleep(0.05)
    return value


def wrong_code(session_id: str, profile: dict) -> str:
    return WRONG if expected_mfa_code(session_id, profile) != WRONG else "111111"


# --- the browser socket -----------------------------------------------------------------------------
async def browser(session_id: str | None = None) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(APP, BROWSER + (f"?session_id={session_id}" if session_id else ""))
    connected, _ = await comm.connect()
    assert connected
    first = json.loads(await comm.receive_from(3))
    assert first["payload"]["name"] == "session_started"
    return comm


async def until(comm: WebsocketCommunicator, predicate, timeout: float = 8.0) -> list[dict]:
    seen: list[dict] = []
    async with asyncio.timeout(timeout):
        while True:
            message = json.loads(await comm.receive_from(timeout))
            seen.append(message)
            if predicate(message):
                return seen


def said(agent: str, words: str):
    return lambda m: (
        m["type"] == "response"
        and m["payload"]["final"]
        and m["payload"]["agent"] == agent
        and words in m["payload"]["text"]
    )


def tool_results(seen: list[dict], tool: str) -> list[dict]:
    return [
        m["payload"]["result"]
        for m in seen
        if m["type"] == "event" and m["payload"].get("name") == "tool_call" and m["payload"]["tool"] == tool
    ]


def send(comm: WebsocketCommunicator, type_: str, **payload):
    return comm.send_to(text_data=json.dumps({"type": type_, "payload": payload}))


async def test_a_code_typed_on_the_web_keypad_verifies_the_caller(fake_runtime, api_client):
    fake_runtime.chat = RulesChat()
    session = "keypad-browser-1"
    profile = await profile_for(api_client, session)
    code = expected_mfa_code(session, profile)
    comm = await browser(session)
    await send(comm, "config", scenario="banking")
    await send(comm, "text", text="i lost my card")
    await until(comm, said("auth_agent", "full name"))
    await send(comm, "text", text="yes thats me")
    seen = await until(comm, said("auth_agent", "type it on your keypad"))
    assert tool_results(seen, "send_mfa_code")[0]["sent"] is True

    await send(comm, "dtmf", digits=wrong_code(session, profile) + "#")
    seen = await until(comm, said("auth_agent", "doesn't match"))
    typed = [m["payload"]["text"] for m in seen if m["type"] == "transcript"]
    assert typed == [f"Keypad entry: {wrong_code(session, profile)}"]
    assert tool_results(seen, "verify_mfa_code")[0]["error"] == "wrong_code"
    assert "Please type it again" in seen[-1]["payload"]["text"]

    await send(comm, "dtmf", digits=code[:2])  # one entry over several messages, ended by '#'
    await send(comm, "dtmf", digits=code[2:] + "#")
    seen = await until(comm, lambda m: m["type"] == "event" and m["payload"].get("name") == "handoff")
    assert [m["payload"]["text"] for m in seen if m["type"] == "transcript"] == [f"Keypad entry: {code}"]
    assert tool_results(seen, "verify_mfa_code") == [{"verified": True, "authenticated": True}]
    assert (seen[-1]["payload"]["from"], seen[-1]["payload"]["to"]) == ("auth_agent", "cards_agent")
    await until(comm, said("cards_agent", "Which card"))
    assert await remembered(session, "authenticated") is True
    await comm.disconnect()


async def test_the_ssn_last_four_typed_on_the_keypad_identifies_the_caller(fake_runtime, api_client):
    fake_runtime.chat = RulesChat()
    session = "keypad-browser-ssn"
    profile = await profile_for(api_client, session, seed=12)
    comm = await browser(session)
    await send(comm, "config", scenario="banking")
    await send(comm, "text", text="what is my balance")
    await until(comm, said("auth_agent", "full name"))
    await send(comm, "text", text=f"my name is {profile['full_name'].lower()}")
    await until(comm, said("auth_agent", "social security number on your keypad"))
    await send(comm, "dtmf", digits=profile["verification"]["ssn_last4"] + "#")
    seen = await until(comm, said("auth_agent", "type it on your keypad"))
    assert tool_results(seen, "verify_client_identity")[0]["verified"] is True
    assert await remembered(session, "identity_verified") is True
    await comm.disconnect()


@pytest.mark.parametrize(
    "payload, why",
    [
        ({}, "1-32 keypad characters"),
        ({"digits": ""}, "1-32 keypad characters"),
        ({"digits": 1234}, "1-32 keypad characters"),
        ({"digits": "1" * 33}, "1-32 keypad characters"),
        ({"digits": "12x4"}, "not 'x'"),
        ({"digits": "12 4"}, "not ' '"),
        ({"digits": "abcd"}, "0-9 * # A B C D"),
    ],
)
async def test_bad_keypad_messages_get_an_error_and_nothing_else(fake_runtime, payload, why):
    comm = await browser()
    other = await browser()
    await comm.send_to(text_data=json.dumps({"type": "dtmf", "payload": payload}))
    error = json.loads(await comm.receive_from(3))
    assert error["type"] == "error" and error["payload"]["code"] == "bad_dtmf"
    assert why in error["payload"]["message"]
    assert await comm.receive_nothing(0.2)  # no conversation was started
    assert await other.receive_nothing(0.1)  # the other session heard nothing of it
    await send(comm, "dtmf", digits="42#")  # the socket is still open and takes a good one
    seen = await until(comm, lambda m: m["type"] == "response" and m["payload"]["text"].startswith("Sure"))
    typed = [m["payload"] for m in seen if m["type"] == "transcript"]
    assert typed == [{"text": "Keypad entry: 42", "final": True, "speaker": "user"}]
    assert fake_runtime.chat.requests[-1].messages[-1]["content"] == "Keypad entry: 42"
    await comm.disconnect()
    await other.disconnect()


# --- the phone media stream ----------------------------------------------------------------------------
async def test_a_code_typed_on_the_phone_keypad_verifies_the_caller(fake_runtime, api_client):
    from test_media_stream import new_call

    fake_runtime.chat = RulesChat()
    fake_runtime.stt = ScriptedSTT(["i lost my card", "yes thats me"])
    call = await new_call()
    profile = await profile_for(api_client, call.session_id)
    code = expected_mfa_code(call.session_id, profile)
    comm = WebsocketCommunicator(
        APP,
        "/api/v1/media/stream?events=1",
        headers=[(b"x-ms-call-connection-id", call.connection_id.encode())],
    )
    assert (await comm.connect())[0]
    client = AcsMediaClient(over_communicator(comm))
    await client.metadata(16000)

    async def answered(agent: str, words: str) -> dict:
        message = await client.until(
            lambda m: (
                m.get("type") == "agent_response"
                and m["payload"]["final"]
                and m["payload"]["agent"] == agent
                and words in m["payload"]["text"]
            )
        )
        await client.collect(len(message["payload"]["text"].split()) * 0.02 + 0.4)  # it plays out
        return message

    await answered("concierge", "")
    await client.speak()
    await answered("auth_agent", "full name")
    await client.speak()
    await answered("auth_agent", "type it on your keypad")

    await client.dtmf(wrong_code(call.session_id, profile) + "#")
    await answered("auth_agent", "doesn't match")
    calls = [m["payload"] for m in client.events if m.get("type") == "tool_call"]
    assert calls[-1]["name"] == "verify_mfa_code" and calls[-1]["result"]["error"] == "wrong_code"

    await client.dtmf(code + "#")
    handoff = await client.event("handoff")
    assert (handoff["payload"]["from"], handoff["payload"]["to"]) == ("auth_agent", "cards_agent")
    typed = [m["payload"]["text"] for m in client.events if m.get("type") == "transcript"]
    assert typed[-2:] == [f"Keypad entry: {wrong_code(call.session_id, profile)}", f"Keypad entry: {code}"]
    checks = [m["payload"] for m in client.events if m.get("type") == "tool_call"]
    checks = [c["result"] for c in checks if c["name"] == "verify_mfa_code"]
    assert [c.get("error") for c in checks] == ["wrong_code", None] and checks[-1]["verified"] is True
    await answered("cards_agent", "Which card")
    assert await remembered(call.session_id, "authenticated") is True
    await comm.disconnect()
