"""An MCP server fails during a tool call (cascade mode): slowed past its timeout, down, or cut while
the call runs. The tool call ends with a clear result (the model is told, the caller sees the
``tool_call`` event), the turn is answered, the next tool call works once the server is healthy,
and every turn the caller heard is in the history.

The agent is a session-scoped one made over REST (``POST /agents`` with the MCP server's tools,
``POST /scenarios``), picked by the browser's ``config``, as an integrator would try a tool."""

from __future__ import annotations

import asyncio
import json
import secrets

import httpx
import pytest
from clients import BrowserCaller, is_type
from fault_clients import (
    TURN_TIMEOUT_S,
    Reply,
    assert_in_history,
    open_caller,
    reply_since,
    send,
    settled,
    type_turn,
    wait_turn,
)
from fault_wires import MCP_SERVER, MCP_TIMEOUT_S
from openai_peer import Text, ToolCall, ToolCalls

from voiceagent.conversation.turn_taking import DEFAULT_FILLERS


def spoken_answers(reply) -> list[str]:
    """The agent's answers without the fillers it says while a slow tool runs (issue 16)."""
    return [a for a in reply.answers if a not in DEFAULT_FILLERS]


pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.usefixtures("clean_log")]

AGENT = "toolbot"
SCENARIO = "tools"
SORRY = "Sorry, I could not look that up just now."
FOUND = "I found it for you."


async def tool_caller(service) -> BrowserCaller:
    """A session whose agent may call the MCP server's tools, and its caller."""
    session_id = f"faults-mcp-{secrets.token_hex(6)}"
    async with httpx.AsyncClient(base_url=service.http, headers=service.auth, timeout=30) as http:
        agent = {
            "session_id": session_id,
            "name": AGENT,
            "prompt": "You look things up for the caller with your tools.",
            "tools": [MCP_SERVER],
        }
        made = await http.post("/agents", json=agent)
        assert made.status_code == 201, made.text
        scenario = {"session_id": session_id, "name": SCENARIO, "start_agent": AGENT, "agents": [AGENT]}
        made = await http.post("/scenarios", json=scenario)
        assert made.status_code == 201, made.text
    caller = await open_caller(service, session_id=session_id, scenario=SCENARIO)
    await caller.inbox.wait(settled, timeout=TURN_TIMEOUT_S)  # no greeting: it listens
    assert not any(m["type"] == "error" for m in caller.inbox.messages), caller.inbox.messages
    return caller


def tool_events(caller: BrowserCaller, start: int = 0) -> list[dict]:
    return [m["payload"] for m in caller.inbox.messages[start:] if is_type("event", name="tool_call")(m)]


def tool_output(faults) -> list[str]:
    """What the model was told of each tool call: the ``tool`` messages of the last chat request."""
    body = faults.chat.last_body or {}
    return [m["content"] for m in body.get("messages", []) if m.get("role") == "tool"]


async def looked_up(caller: BrowserCaller, faults, text: str = "card 1234") -> Reply:
    """A healthy tool turn: the model calls crm_echo, the tool answers, the model answers."""
    faults.chat.push(ToolCalls([ToolCall(f"{MCP_SERVER}_echo", {"text": text})]), Text(FOUND))
    start = len(caller.inbox.messages)
    reply = await type_turn(caller, "look up my card")
    events = tool_events(caller, start)
    assert [(e["tool"], e["ok"]) for e in events] == [(f"{MCP_SERVER}_echo", True)], events
    assert text in json.dumps(events[0]["result"]), events
    assert spoken_answers(reply) == [FOUND] and not reply.errors, reply
    return reply


@pytest.mark.parametrize("fault", ["latency", "down"])
async def test_a_slow_or_absent_mcp_server_fails_the_tool_call_clearly_and_the_turn_is_answered(
    service, faults, fault
):
    caller = await tool_caller(service)
    try:
        if fault == "latency":
            faults.mcp_proxy.latency((MCP_TIMEOUT_S + 1) * 1000)
        else:
            faults.mcp_proxy.down()
            faults.mcp_proxy.cut()  # the server is gone: its open connections too
        faults.chat.push(ToolCalls([ToolCall(f"{MCP_SERVER}_echo", {"text": "card 1234"})]), Text(SORRY))
        start = len(caller.inbox.messages)
        failed = await type_turn(caller, "look up my card")
        events = tool_events(caller, start)
        assert [(e["tool"], e["ok"]) for e in events] == [(f"{MCP_SERVER}_echo", False)], events
        message = json.dumps(events[0]["result"])
        expected = "timed out after" if fault == "latency" else "the tool is unavailable"
        assert expected in message and "127.0.0.1" not in message, message  # no address (issue 31.10)
        told = tool_output(faults)
        assert told and '"error"' in told[-1], told  # the model was told the call failed
        assert spoken_answers(failed) == [SORRY] and not failed.errors, failed

        faults.mcp_proxy.reset()
        await looked_up(caller, faults)
        await assert_in_history(
            service,
            caller.session_id,
            [
                ("user", "look up my card"),
                ("assistant", SORRY),
                ("user", "look up my card"),
                ("assistant", FOUND),
            ],
        )
    finally:
        await caller.close()


async def test_an_mcp_connection_cut_during_a_tool_call_ends_the_call_and_the_turn_is_answered(
    service, faults
):
    caller = await tool_caller(service)
    try:
        faults.chat.push(ToolCalls([ToolCall(f"{MCP_SERVER}_slow", {"seconds": 1.0})]), Text("All done."))
        start = len(caller.inbox.messages)
        await send(caller, "text", {"text": "run the slow check"})
        async with asyncio.timeout(TURN_TIMEOUT_S):
            while ("slow", 1.0) not in faults.mcp_calls:  # until the tool is running on the server
                await asyncio.sleep(0.02)
        assert faults.mcp_proxy.cut() >= 1
        await wait_turn(caller, start)
        reply = reply_since(caller, "run the slow check", start)
        events = tool_events(caller, start)
        assert [e["tool"] for e in events] == [f"{MCP_SERVER}_slow"], events
        # the break is noticed at once: the call runs again on a new connection (the manager's one
        # retry), rather than waiting out its timeout on a request whose answer can never come
        assert events[0]["ok"] and events[0]["result"] == {"result": "done"}, events
        assert faults.mcp_calls.count(("slow", 1.0)) == 2, faults.mcp_calls
        assert spoken_answers(reply) == ["All done."] and not reply.errors, reply

        await looked_up(caller, faults)
        await assert_in_history(
            service,
            caller.session_id,
            [
                ("user", "run the slow check"),
                ("assistant", "All done."),
                ("user", "look up my card"),
                ("assistant", FOUND),
            ],
        )
    finally:
        await caller.close()
