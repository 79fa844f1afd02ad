# ruff: noqa: F811 (the fixtures are test_consumer.py's, imported by name)
"""Keypad (DTMF) one-time codes over the AudioHook bridge: the bridge always runs live, so the model
is the local realtime peer, scripted as a model following the auth agent's prompt would act; the
tools are the real built-ins on the session's demo caller (made for the AudioHook session id before
the contact center opened it). The caller's ``dtmf`` digits reach the model as "Keypad entry: N";
the code it passes on verifies the caller, a wrong one typed is refused."""

from __future__ import annotations

import asyncio
import json

import pytest
from realtime_peer import Call, Say
from test_consumer import bridge, closed, connect, peer, speak  # noqa: F401 (fixtures)

from agents_app.builtin_tools import expected_mfa_code

pytestmark = pytest.mark.django_db(transaction=True)


def outputs(peer, name: str) -> list[dict]:
    """The results of ``name`` the bridge sent back to the model, oldest first (the scripted calls'
    ids name their tool)."""
    items = [e["item"] for e in peer.received("conversation.item.create")]
    return [
        json.loads(i["output"])
        for i in items
        if i.get("type") == "function_call_output" and i["call_id"].startswith(f"call-{name}")
    ]


async def keyed(client, digits: str) -> None:
    for digit in digits:
        await client.send("dtmf", {"digit": digit})


async def test_a_code_typed_on_the_contact_center_keypad_verifies_the_caller(bridge, peer, api_client):
    from agents_app import sessions

    session_id = "9c1f2f60-0000-4000-8000-00000000cafe"
    made = await asyncio.to_thread(
        api_client.post,
        "/api/v1/profiles/generate",
        {"seed": 7, "scenario": "banking", "session_id": session_id},
        format="json",
    )
    assert made.status_code == 201
    profile = made.json()
    code = expected_mfa_code(session_id, profile)
    wrong = "000000" if code != "000000" else "111111"
    identity = {"full_name": profile["full_name"], "date_of_birth": profile["verification"]["date_of_birth"]}
    peer.user_says("i lost my card", "yes thats me")
    peer.push(
        Call("handoff_auth_agent", {"reason": "lost card"}, call_id="call-handoff_auth_agent"),
        Call("verify_client_identity", identity, call_id="call-verify_client_identity"),
        Call("send_mfa_code", {}, call_id="call-send_mfa_code-1"),
        Say("I've sent you a code. Please read it out or type it on your keypad."),
        # the model passes the keypad turn on as it came, then (the right one) as digits
        Call("verify_mfa_code", {"code": f"Keypad entry: {wrong}"}, call_id="call-verify_mfa_code-1"),
        Say("That code doesn't match. Please type it again."),
        Call("verify_mfa_code", {"code": code}, call_id="call-verify_mfa_code-2"),
        Say("Thank you, you're verified."),
    )
    comm, client, _ = await connect(session_id=session_id)
    await client.open(input_variables={"promptName": "banking"})
    await client.expect("opened")
    await client.collect_audio(0.8)
    await speak(client)
    await client.collect_audio(1.0)
    await speak(client)
    await client.collect_audio(1.5)
    assert outputs(peer, "send_mfa_code")[-1]["sent"] is True

    await keyed(client, wrong + "#")
    await client.collect_audio(1.5)
    assert outputs(peer, "verify_mfa_code")[-1]["error"] == "wrong_code"
    await keyed(client, code + "#")
    await client.collect_audio(1.5)
    assert outputs(peer, "verify_mfa_code")[-1] == {"verified": True, "authenticated": True}

    texts = [json.dumps(e) for e in peer.received("conversation.item.create")]
    assert any(f"Keypad entry: {wrong}" in t for t in texts)
    assert any(f"Keypad entry: {code}" in t for t in texts)
    await closed(comm, client)
    state = await sessions.db_call(sessions.load_state, session_id)
    assert state.memory["authenticated"] is True and state.memory["caller_profile"]["id"] == profile["id"]
