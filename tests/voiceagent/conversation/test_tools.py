"""The central tool registry: schema derivation, registration, execution, handoff tools."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Annotated, Any, Literal, Optional

import pytest

from voiceagent.conversation import tools as tools_module
from voiceagent.conversation.specs import (
    GENERIC_HANDOFF_TOOL,
    AgentSpec,
    HandoffMap,
    HandoffSpec,
    ScenarioSpec,
)
from voiceagent.conversation.tools import (
    REGISTRY,
    ToolContext,
    ToolRegistry,
    ToolResult,
    ToolSpec,
    execute_spec,
    handoff_tool_specs,
    parse_docstring,
    register_handoff_tools,
    resolve_handoff,
    tool,
    tool_spec_from_function,
)

OBJECT_SCHEMA = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}


async def _noop(**kwargs: Any) -> dict:
    return {"args": kwargs}


def make_spec(name: str = "t", **kwargs: Any) -> ToolSpec:
    kwargs.setdefault("description", f"tool {name}")
    kwargs.setdefault("parameters", dict(OBJECT_SCHEMA))
    kwargs.setdefault("func", _noop)
    return ToolSpec(name=name, **kwargs)


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry()


# --------------------------------------------------------------------------------------------------
# Schema derivation
# --------------------------------------------------------------------------------------------------


def test_scalar_types_and_required(registry: ToolRegistry) -> None:
    @registry.tool()
    async def scalars(s: str, i: int, f: float, b: bool) -> None:
        """Scalars."""

    params = registry.get("scalars").parameters
    assert params == {
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "i": {"type": "integer"},
            "f": {"type": "number"},
            "b": {"type": "boolean"},
        },
        "required": ["s", "i", "f", "b"],
        "additionalProperties": False,
    }


def test_container_types(registry: ToolRegistry) -> None:
    @registry.tool()
    async def containers(
        names: list[str],
        counts: list[int],
        anything: list,
        mapping: dict,
        scores: dict[str, float],
    ) -> None:
        """Containers."""

    props = registry.get("containers").parameters["properties"]
    assert props["names"] == {"type": "array", "items": {"type": "string"}}
    assert props["counts"] == {"type": "array", "items": {"type": "integer"}}
    assert props["anything"] == {"type": "array"}
    assert props["mapping"] == {"type": "object"}
    assert props["scores"] == {"type": "object", "additionalProperties": {"type": "number"}}


def test_literal_optional_and_defaults(registry: ToolRegistry) -> None:
    @registry.tool()
    async def forms(
        mode: Literal["fast", "slow"],
        level: Literal[1, 2, 3] = 2,
        note: str | None = None,
        tag: Optional[str] = None,  # noqa: UP045 - the typing spelling is tested too
        maybe: int | None = None,
        nullable_no_default: str | None = None,
        limit: int = 5,
        flag: bool = False,
        words: list[str] | None = None,
    ) -> None:
        """Forms."""

    params = registry.get("forms").parameters
    props = params["properties"]
    assert props["mode"] == {"type": "string", "enum": ["fast", "slow"]}
    assert props["level"] == {"type": "integer", "enum": [1, 2, 3], "default": 2}
    assert props["note"] == {"type": "string"}
    assert props["tag"] == {"type": "string"}
    assert props["maybe"] == {"type": "integer"}
    assert props["limit"] == {"type": "integer", "default": 5}
    assert props["flag"] == {"type": "boolean", "default": False}
    assert props["words"] == {"type": "array", "items": {"type": "string"}}
    assert params["required"] == ["mode"]


async def test_optional_without_default_is_not_required_and_gets_none(registry: ToolRegistry) -> None:
    seen = {}

    @registry.tool()
    async def opt(city: str, unit: str | None) -> dict:
        """Weather."""
        seen["unit"] = unit
        return {"city": city}

    assert registry.get("opt").parameters["required"] == ["city"]
    result = await registry.execute("opt", {"city": "Oslo"}, ToolContext())
    assert result.ok, result.error
    assert seen == {"unit": None}


def test_union_and_annotated(registry: ToolRegistry) -> None:
    @registry.tool()
    async def mixed(
        value: int | str, label: Annotated[str, "A label."], opt: Annotated[int, "Num."] | None = None
    ):
        """Mixed."""

    props = registry.get("mixed").parameters["properties"]
    assert props["value"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert props["label"] == {"type": "string", "description": "A label."}
    assert props["opt"] == {"type": "integer", "description": "Num."}


def test_unsupported_annotation_rejected(registry: ToolRegistry) -> None:
    with pytest.raises(TypeError, match="unsupported annotation"):

        @registry.tool()
        async def bad(when: threading.Event) -> None:
            """Bad."""

    assert "bad" not in registry


def test_annotation_names_resolve_from_closure_and_return_annotation_is_ignored(
    registry: ToolRegistry,
) -> None:
    Mode = Literal["a", "b"]

    class Unresolvable:
        pass

    @registry.tool()
    async def local(mode: Mode) -> Unresolvable:
        """Local."""
        return Mode

    assert registry.get("local").parameters["properties"]["mode"] == {"type": "string", "enum": ["a", "b"]}

    with pytest.raises(TypeError, match="cannot resolve"):

        @registry.tool()
        async def broken(x: NotDefinedAnywhere) -> None:  # noqa: F821
            """Broken."""


def test_google_docstring(registry: ToolRegistry) -> None:
    @registry.tool()
    async def lookup(order_id: str, verbose: bool = False) -> dict:
        """Look up an order
        by its identifier.

        More detail that is not part of the description.

        Args:
            order_id: The order number,
                as printed on the receipt.
            verbose (bool): Include line items.

        Returns:
            The order.
        """
        return {}

    spec = registry.get("lookup")
    assert spec.description == "Look up an order by its identifier."
    props = spec.parameters["properties"]
    assert props["order_id"]["description"] == "The order number, as printed on the receipt."
    assert props["verbose"] == {"type": "boolean", "description": "Include line items.", "default": False}


def test_sphinx_docstring(registry: ToolRegistry) -> None:
    @registry.tool()
    async def book(room: str, nights: int = 1) -> dict:
        """Book a hotel room.

        :param room: Room type to book,
            for example double.
        :param int nights: Number of nights.
        :returns: The booking.
        """
        return {}

    spec = registry.get("book")
    assert spec.description == "Book a hotel room."
    props = spec.parameters["properties"]
    assert props["room"]["description"] == "Room type to book, for example double."
    assert props["nights"]["description"] == "Number of nights."


def test_parse_docstring_edge_cases() -> None:
    assert parse_docstring(None) == ("", {})
    assert parse_docstring("Just a summary.") == ("Just a summary.", {})
    assert parse_docstring("Summary.\nArgs:\n    x: The x.\n") == ("Summary.", {"x": "The x."})
    assert parse_docstring(":param x: The x.") == ("", {"x": "The x."})


def test_explicit_schema_and_overrides(registry: ToolRegistry) -> None:
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string", "minLength": 2}},
        "required": ["q"],
    }

    @registry.tool(name="search_kb", description="Search the knowledge base.", schema=schema, timeout_s=3)
    async def whatever(q, ctx: ToolContext):
        """Ignored docstring."""
        return q

    spec = registry.get("search_kb")
    assert spec.parameters == schema
    assert spec.description == "Search the knowledge base."
    assert spec.timeout_s == 3
    assert spec.context_param == "ctx"
    assert spec.source == "builtin"
    assert "whatever" not in registry


def test_bare_decorator_and_function_returned_unchanged(registry: ToolRegistry) -> None:
    async def ping() -> str:
        """Ping."""
        return "pong"

    assert registry.tool(ping) is ping
    assert registry.get("ping").description == "Ping."
    assert registry.get("ping").parameters == OBJECT_SCHEMA


def test_tool_spec_from_function_does_not_register(registry: ToolRegistry) -> None:
    async def probe(x: int) -> int:
        """Probe."""
        return x

    spec = tool_spec_from_function(probe, source="mcp", server="srv", timeout_s=2)
    assert (spec.name, spec.source, spec.server, spec.timeout_s) == ("probe", "mcp", "srv", 2)
    assert spec.func is probe
    assert len(registry) == 0 and "probe" not in REGISTRY


def test_non_async_rejected(registry: ToolRegistry) -> None:
    with pytest.raises(TypeError, match="async"):

        @registry.tool()
        def sync_tool(x: int) -> int:
            return x

    assert "sync_tool" not in registry


def test_ctx_is_not_in_schema(registry: ToolRegistry) -> None:
    @registry.tool()
    async def remember(key: str, ctx: ToolContext) -> None:
        """Remember."""

    spec = registry.get("remember")
    assert list(spec.parameters["properties"]) == ["key"]
    assert spec.parameters["required"] == ["key"]
    assert spec.context_param == "ctx"


def test_toolspec_validation() -> None:
    with pytest.raises(ValueError, match="invalid tool name"):
        make_spec("has space")
    with pytest.raises(ValueError, match="invalid tool name"):
        make_spec("x" * 65)
    with pytest.raises(ValueError, match="type 'object'"):
        make_spec(parameters={"type": "string"})
    with pytest.raises(ValueError, match="invalid parameters schema"):
        make_spec(parameters={"type": "object", "properties": {"a": {"type": "nope"}}})
    with pytest.raises(ValueError, match="timeout_s"):
        make_spec(timeout_s=0)


# --------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------


def test_duplicate_registration(registry: ToolRegistry) -> None:
    registry.register(make_spec("a"))
    with pytest.raises(ValueError, match="already registered"):
        registry.register(make_spec("a", description="other"))
    assert registry.get("a").description == "tool a"
    registry.register(make_spec("a", description="other"), replace=True)
    assert registry.get("a").description == "other"

    async def a() -> None:
        """Dup."""

    with pytest.raises(ValueError, match="already registered"):
        registry.tool()(a)


def test_unregister_and_version(registry: ToolRegistry) -> None:
    assert registry.version == 0
    registry.register(make_spec("builtin_one"))
    registry.register(make_spec("crm_find", source="mcp", server="crm"))
    registry.register(make_spec("crm_update", source="mcp", server="crm"))
    registry.register(make_spec("cal_list", source="mcp", server="cal"))
    assert registry.version == 4
    assert registry.names() == ["builtin_one", "crm_find", "crm_update", "cal_list"]

    assert registry.unregister_where(server="crm") == 2
    assert registry.version == 5
    assert registry.names() == ["builtin_one", "cal_list"]
    assert registry.unregister_where(server="crm") == 0
    assert registry.version == 5  # nothing changed

    assert registry.unregister_where(lambda s: s.source == "mcp") == 1
    assert registry.version == 6
    assert registry.unregister("builtin_one") is True
    assert registry.unregister("builtin_one") is False
    assert registry.version == 7
    assert len(registry) == 0
    with pytest.raises(ValueError):
        registry.unregister_where()


def test_get_contains_specs_for(registry: ToolRegistry) -> None:
    registry.register(make_spec("a"))
    registry.register(make_spec("b"))
    assert "a" in registry
    assert "zzz" not in registry
    assert registry.get("zzz") is None
    assert [s.name for s in registry.specs_for(["b", "missing", "a", "b"])] == ["b", "a"]


def test_concurrent_registration(registry: ToolRegistry) -> None:
    def worker(i: int) -> None:
        for j in range(50):
            registry.register(make_spec(f"t{i}_{j}"))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(registry) == 400
    assert registry.version == 400


def test_sync_group(registry: ToolRegistry) -> None:
    registry.register(make_spec("keep"))
    mcp = lambda s: s.server == "crm"  # noqa: E731
    specs = [make_spec("crm_a", source="mcp", server="crm"), make_spec("crm_b", source="mcp", server="crm")]
    assert registry.sync(specs, mcp) is True
    assert registry.version == 2
    assert registry.sync(specs, mcp) is False  # identical: no version bump
    assert registry.version == 2
    assert registry.sync(specs[:1], mcp) is True
    assert registry.names() == ["keep", "crm_a"]
    with pytest.raises(ValueError, match="already registered"):
        registry.sync([make_spec("keep", source="mcp", server="crm")], mcp)
    assert registry.names() == ["keep", "crm_a"]


def test_module_level_tool_decorator() -> None:
    async def module_level_probe_tool(x: int) -> int:
        """Probe."""
        return x

    try:
        assert tool(module_level_probe_tool) is module_level_probe_tool
        assert "module_level_probe_tool" in REGISTRY
        assert REGISTRY.get("module_level_probe_tool").parameters["required"] == ["x"]
    finally:
        REGISTRY.unregister("module_level_probe_tool")


# --------------------------------------------------------------------------------------------------
# Shapes
# --------------------------------------------------------------------------------------------------


def test_openai_and_realtime_shapes(registry: ToolRegistry) -> None:
    @registry.tool()
    async def weather(city: str) -> dict:
        """Current weather."""
        return {}

    spec = registry.get("weather")
    assert spec.to_openai() == {
        "type": "function",
        "function": {"name": "weather", "description": "Current weather.", "parameters": spec.parameters},
    }
    assert spec.to_realtime() == {
        "type": "function",
        "name": "weather",
        "description": "Current weather.",
        "parameters": spec.parameters,
    }
    spec.to_openai()["function"]["parameters"]["properties"]["x"] = {}
    assert "x" not in spec.parameters["properties"]  # a copy, the registry stays intact


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


# --------------------------------------------------------------------------------------------------
# Handoff tools
# --------------------------------------------------------------------------------------------------


def agent(name: str, trigger: str | None = None, description: str = "") -> AgentSpec:
    return AgentSpec(name=name, prompt_template="", description=description, handoff_trigger=trigger)


AGENTS = {
    "triage": agent("triage", description="Routes callers."),
    "billing": agent("billing", "transfer_to_billing", "Invoices and payments."),
    "support": agent("support", "transfer_to_support", "Technical problems."),
    "sales": agent("sales", "transfer_to_sales"),
}

SCENARIO = ScenarioSpec(
    name="helpdesk",
    start_agent="triage",
    agents=("triage", "billing", "support"),
    handoffs=(
        HandoffSpec("triage", "billing", "transfer_to_billing", "discrete"),
        HandoffSpec("triage", "support", "transfer_to_support", "announced"),
    ),
)


def test_handoff_tool_specs() -> None:
    specs = {s.name: s for s in handoff_tool_specs(AGENTS)}
    assert set(specs) == {
        "transfer_to_billing",
        "transfer_to_support",
        "transfer_to_sales",
        GENERIC_HANDOFF_TOOL,
    }
    billing = specs["transfer_to_billing"]
    assert billing.source == "handoff"
    assert billing.description == "Transfer the conversation to billing: Invoices and payments."
    assert billing.parameters == {
        "type": "object",
        "properties": {
            "reason": {"type": "string", "description": "Why the conversation is being transferred."}
        },
        "required": [],
        "additionalProperties": False,
    }
    assert specs["transfer_to_sales"].description == "Transfer the conversation to sales."
    generic = specs[GENERIC_HANDOFF_TOOL]
    assert generic.source == "handoff"
    assert set(generic.parameters["properties"]) == {"target_agent", "reason"}
    assert generic.parameters["required"] == ["target_agent"]


def test_handoff_trigger_must_be_a_valid_name() -> None:
    bad = {"x": AgentSpec(name="x", prompt_template="", handoff_trigger="go to x", origin="agents/x.yaml")}
    with pytest.raises(ValueError, match=r"agents/x\.yaml"):
        handoff_tool_specs(bad)


async def test_handoff_tools_return_handoff_payload(registry: ToolRegistry) -> None:
    register_handoff_tools(registry, AGENTS)
    result = await registry.execute("transfer_to_billing", {"reason": "invoice question"}, ToolContext())
    assert result.ok and result.is_handoff
    assert result.result == {"handoff": True, "target_agent": "billing", "reason": "invoice question"}

    result = await registry.execute("transfer_to_support", {}, ToolContext())
    assert result.result == {"handoff": True, "target_agent": "support", "reason": ""}

    result = await registry.execute(GENERIC_HANDOFF_TOOL, '{"target_agent": "sales", "reason": "buy"}', None)
    assert result.result == {"handoff": True, "target_agent": "sales", "reason": "buy"}

    result = await registry.execute(GENERIC_HANDOFF_TOOL, {"reason": "?"}, None)
    assert result.error["type"] == "validation_error"


def test_register_handoff_tools_idempotent_and_replaces_stale(registry: ToolRegistry) -> None:
    registry.register(make_spec("builtin_one"))
    names = register_handoff_tools(registry, AGENTS)
    assert set(names) == {
        "transfer_to_billing",
        "transfer_to_support",
        "transfer_to_sales",
        GENERIC_HANDOFF_TOOL,
    }
    version = registry.version
    register_handoff_tools(registry, AGENTS)
    assert registry.version == version  # nothing changed

    fewer = {k: v for k, v in AGENTS.items() if k != "sales"}
    fewer["billing"] = agent("billing", "transfer_to_billing", "Only invoices.")
    register_handoff_tools(registry, fewer)
    assert registry.version == version + 1
    assert "transfer_to_sales" not in registry
    assert (
        registry.get("transfer_to_billing").description
        == "Transfer the conversation to billing: Only invoices."
    )
    assert "builtin_one" in registry

    with pytest.raises(ValueError, match="already registered"):
        register_handoff_tools(registry, {"x": agent("x", "builtin_one")})
    assert "transfer_to_billing" in registry  # nothing changed on conflict


def test_resolve_handoff() -> None:
    hmap = HandoffMap.build(SCENARIO, AGENTS)
    assert resolve_handoff(hmap, "triage", "transfer_to_billing", {}) == HandoffSpec(
        "triage", "billing", "transfer_to_billing", "discrete"
    )
    assert resolve_handoff(hmap, "triage", "transfer_to_support", '{"reason": "x"}') == HandoffSpec(
        "triage", "support", "transfer_to_support", "announced"
    )
    # No explicit edge billing -> support: still a transfer, announced.
    assert resolve_handoff(hmap, "billing", "transfer_to_support", None).type == "announced"
    # Generic tool: the target comes from the arguments (case-insensitive), the type from the edge.
    assert resolve_handoff(hmap, "triage", GENERIC_HANDOFF_TOOL, {"target_agent": "Billing"}) == HandoffSpec(
        "triage", "billing", GENERIC_HANDOFF_TOOL, "discrete"
    )
    assert (
        resolve_handoff(hmap, "triage", GENERIC_HANDOFF_TOOL, '{"target_agent": "support"}').type
        == "announced"
    )
    assert resolve_handoff(hmap, "triage", GENERIC_HANDOFF_TOOL, {}) is None
    assert resolve_handoff(hmap, "triage", GENERIC_HANDOFF_TOOL, "not json") is None
    assert (
        resolve_handoff(hmap, "triage", GENERIC_HANDOFF_TOOL, {"target_agent": "sales"}) is None
    )  # not in scenario
    # Not a handoff tool, or a handoff to oneself.
    assert resolve_handoff(hmap, "triage", "lookup_order", {"target_agent": "billing"}) is None
    assert resolve_handoff(hmap, "triage", "transfer_to_sales", {}) is None  # sales not in scenario
    assert resolve_handoff(hmap, "billing", "transfer_to_billing", {}) is None


def test_module_exports() -> None:
    for name in tools_module.__all__:
        assert hasattr(tools_module, name), name
