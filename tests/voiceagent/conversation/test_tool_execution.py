"""Tools: executing a call - argument validation, context, timeouts, failures, cancellation."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from voiceagent.conversation.tools import (
    ToolContext,
    ToolRegistry,
    ToolResult,
    ToolSpec,
    execute_spec,
)


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry()


# --------------------------------------------------------------------------------------------------
# Execution
# --------------------------------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.calls: list[dict] = []


@pytest.fixture
def recorded(registry: ToolRegistry) -> Recorder:
    rec = Recorder()

    @registry.tool()
    async def order(order_id: str, quantity: int = 1) -> dict:
        """Place an order."""
        rec.calls.append({"order_id": order_id, "quantity": quantity})
        return {"order_id": order_id, "quantity": quantity}

    return rec


async def test_execute_ok_with_dict_and_json_string(registry: ToolRegistry, recorded: Recorder) -> None:
    result = await registry.execute("order", {"order_id": "A1", "quantity": 3}, ToolContext())
    assert result.ok and result.error is None
    assert result.result == {"order_id": "A1", "quantity": 3}
    assert result.duration_ms >= 0
    assert json.loads(result.to_model_content()) == {"order_id": "A1", "quantity": 3}

    result = await registry.execute("order", '{"order_id": "B2"}', ToolContext())
    assert result.ok and result.result == {"order_id": "B2", "quantity": 1}
    assert len(recorded.calls) == 2


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({}, "'order_id' is a required property"),
        ({"order_id": 5}, "order_id: 5 is not of type 'string'"),
        ({"order_id": "A", "quantity": "many"}, "quantity: 'many' is not of type 'integer'"),
        ({"order_id": "A", "coupon": "X"}, "Additional properties are not allowed"),
        ('{"order_id": ', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
async def test_validation_errors_do_not_call_the_tool(
    registry: ToolRegistry, recorded: Recorder, arguments: Any, fragment: str
) -> None:
    result = await registry.execute("order", arguments, ToolContext())
    assert not result.ok
    assert result.error["type"] == "validation_error"
    assert fragment in result.error["message"]
    assert recorded.calls == []
    assert json.loads(result.to_model_content()) == {"error": result.error}


async def test_validation_lists_every_problem(registry: ToolRegistry, recorded: Recorder) -> None:
    result = await registry.execute("order", {"quantity": "x", "extra": 1}, ToolContext())
    message = result.error["message"]
    assert "required" in message and "not of type" in message and "Additional properties" in message
    assert recorded.calls == []


async def test_empty_arguments_mean_no_arguments(registry: ToolRegistry) -> None:
    @registry.tool()
    async def now() -> str:
        """Now."""
        return "noon"

    for arguments in (None, "", "  ", {}):
        result = await registry.execute("now", arguments, ToolContext())
        assert result.ok and result.result == "noon"
        assert result.to_model_content() == '"noon"'


async def test_unknown_tool(registry: ToolRegistry) -> None:
    result = await registry.execute("nope", {}, ToolContext())
    assert result.error == {"type": "unknown_tool", "message": "unknown tool 'nope'"}
    assert not result.ok


async def test_timeout(registry: ToolRegistry) -> None:
    finished = []

    @registry.tool(timeout_s=0.05)
    async def slow() -> str:
        """Slow."""
        await asyncio.sleep(1)
        finished.append(True)
        return "done"

    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await registry.execute("slow", {}, ToolContext())
    assert loop.time() - started < 0.5
    assert not result.ok
    assert result.error["type"] == "timeout"
    assert "0.05" in result.error["message"]
    assert finished == []


async def test_tool_raising_timeouterror_is_an_exception(registry: ToolRegistry) -> None:
    @registry.tool()
    async def upstream() -> None:
        """Upstream."""
        raise TimeoutError("backend did not answer")

    result = await registry.execute("upstream", {}, ToolContext())
    assert result.error == {"type": "exception", "message": "TimeoutError: backend did not answer"}


async def test_exception_is_reported_and_logged_without_values(
    registry: ToolRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    @registry.tool()
    async def login(username: str, password: str) -> None:
        """Log in."""
        raise RuntimeError("backend down")

    with caplog.at_level(logging.ERROR, logger="voiceagent.conversation.tools"):
        result = await registry.execute("login", {"username": "bob", "password": "hunter2"}, ToolContext())
    assert not result.ok
    assert result.error == {"type": "exception", "message": "RuntimeError: backend down"}
    assert "login" in caplog.text and "password" in caplog.text  # the argument name is logged
    assert "hunter2" not in caplog.text and "bob" not in caplog.text


async def test_cancelled_error_propagates(registry: ToolRegistry) -> None:
    started = asyncio.Event()
    cancelled = []

    @registry.tool(timeout_s=5)
    async def long_running() -> None:
        """Long."""
        started.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    task = asyncio.create_task(registry.execute("long_running", {}, ToolContext()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled == [True]


async def test_cancelled_error_raised_by_tool_propagates(registry: ToolRegistry) -> None:
    @registry.tool()
    async def cancels() -> None:
        """Cancels."""
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await registry.execute("cancels", {}, ToolContext())


async def test_ctx_injection_and_memory_update(registry: ToolRegistry) -> None:
    @registry.tool()
    async def remember(key: str, value: str, ctx: ToolContext) -> dict:
        """Remember a value."""
        ctx.memory[key] = value
        return {"session": ctx.session_id, "agent": ctx.agent, "scenario": ctx.scenario, "n": len(ctx.memory)}

    ctx = ToolContext(session_id="s1", agent="sales", scenario="shop", memory={"old": 1}, extra={"x": 1})
    result = await registry.execute("remember", {"key": "name", "value": "Ada"}, ctx)
    assert result.ok
    assert result.result == {"session": "s1", "agent": "sales", "scenario": "shop", "n": 2}
    assert ctx.memory == {"old": 1, "name": "Ada"}

    # "ctx" is not an argument the model can pass.
    result = await registry.execute("remember", {"key": "k", "value": "v", "ctx": "x"}, ctx)
    assert result.error["type"] == "validation_error"

    # No context given: the tool still gets an (empty) one.
    result = await registry.execute("remember", {"key": "k", "value": "v"}, None)
    assert result.ok and result.result["session"] == ""


async def test_direct_toolspec_with_ctx_is_detected() -> None:
    async def mcp_call(ctx: ToolContext, **arguments: Any) -> dict:
        return {"session": ctx.session_id, "arguments": arguments}

    spec = ToolSpec(
        name="crm_find",
        description="Find a contact.",
        parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        func=mcp_call,
        source="mcp",
        server="crm",
    )
    assert spec.context_param == "ctx"
    result = await execute_spec(spec, {"q": "ada"}, ToolContext(session_id="s9"))
    assert result.result == {"session": "s9", "arguments": {"q": "ada"}}


async def test_non_json_results_are_stringified(registry: ToolRegistry) -> None:
    class Thing:
        def __str__(self) -> str:
            return "a thing"

    @registry.tool()
    async def odd() -> dict:
        """Odd."""
        return {"thing": Thing(), "items": (1, 2), "n": 1.5}

    @registry.tool()
    async def odd_top() -> Thing:
        """Odd top."""
        return Thing()

    result = await registry.execute("odd", {}, ToolContext())
    assert result.result == {"thing": "a thing", "items": [1, 2], "n": 1.5}
    result = await registry.execute("odd_top", {}, ToolContext())
    assert result.result == "a thing"
    assert result.to_model_content() == '"a thing"'


def test_tool_result_model_content() -> None:
    ok = ToolResult(name="x", ok=True, result={"a": "ü"})
    assert ok.to_model_content() == '{"a": "ü"}'
    bad = ToolResult.failure("x", "timeout", "too slow")
    assert json.loads(bad.to_model_content()) == {"error": {"type": "timeout", "message": "too slow"}}
    assert not bad.is_handoff
