"""Helpers for the tool package tests: a no-op tool and a ToolSpec with defaults."""

from __future__ import annotations

from typing import Any

from voiceagent.conversation.tools import ToolSpec

OBJECT_SCHEMA = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}


async def noop(**kwargs: Any) -> dict:
    return {"args": kwargs}


def make_spec(name: str = "t", **kwargs: Any) -> ToolSpec:
    kwargs.setdefault("description", f"tool {name}")
    kwargs.setdefault("parameters", dict(OBJECT_SCHEMA))
    kwargs.setdefault("func", noop)
    return ToolSpec(name=name, **kwargs)
