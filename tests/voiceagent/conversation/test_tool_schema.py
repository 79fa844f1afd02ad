"""Tools: the schema and description derived from a function's hints and docstring; the model shapes."""

from __future__ import annotations

import threading
from typing import Annotated, Literal, Optional

import pytest
from toolkit import OBJECT_SCHEMA, make_spec

from voiceagent.conversation.tools import (
    REGISTRY,
    ToolContext,
    ToolRegistry,
    parse_docstring,
    tool_spec_from_function,
)


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
