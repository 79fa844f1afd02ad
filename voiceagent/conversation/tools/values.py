"""The value types of a tool call: what a tool is (:class:`ToolSpec`), what it may know
(:class:`ToolContext`), what it returns (:class:`ToolResult`) and how it fails in words
(:class:`ToolError`). Kept apart so schema derivation, execution and the registry share them
without importing each other.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

DEFAULT_TIMEOUT_S = 10.0
HANDOFF_SOURCE = "handoff"
ToolSource = Literal["builtin", "mcp", "handoff"] | str

ERROR_VALIDATION = "validation_error"
ERROR_TIMEOUT = "timeout"
ERROR_EXCEPTION = "exception"
ERROR_UNKNOWN_TOOL = "unknown_tool"
ERROR_FAILED = "failed"

# What the OpenAI chat-completions and realtime APIs accept as a function name.
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

ToolFunc = Callable[..., Awaitable[Any]]

# --------------------------------------------------------------------------------------------------
# Context and result
# --------------------------------------------------------------------------------------------------


class ToolError(Exception):
    """A tool failed in a way it can put in words (a remote server unreachable or lost, the tool
    reporting an error): the model is told the message, the log gets one WARNING. Why not a plain
    exception: those are bugs, logged at ERROR with their traceback, which an outage of someone
    else's server is not. ``detail`` is what the log gets instead of the message, when it may say
    more than the model, the caller and the history should see (an internal server address)."""

    def __init__(self, message: str, detail: str | None = None):
        super().__init__(message)
        self.detail = detail or message


@dataclass
class ToolContext:
    """What a tool may know about the call; injected into a ``ctx`` parameter.

    ``memory`` is the session's working memory: the tool may read and update it in place.
    """

    session_id: str = ""
    agent: str = ""
    scenario: str = ""
    memory: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


@dataclass
class ToolResult:
    """The outcome of one tool call; ``error`` is ``{"type": ..., "message": ...}`` when not ``ok``."""

    name: str
    ok: bool
    result: Any = None
    error: dict | None = None
    duration_ms: float = 0.0

    @classmethod
    def failure(cls, name: str, error_type: str, message: str, duration_ms: float = 0.0) -> ToolResult:
        return cls(
            name=name, ok=False, error={"type": error_type, "message": message}, duration_ms=duration_ms
        )

    @property
    def is_handoff(self) -> bool:
        """True when a handoff tool asked for a transfer (resolve it with :func:`resolve_handoff`)."""
        return self.ok and isinstance(self.result, dict) and self.result.get("handoff") is True

    def to_model_content(self) -> str:
        """The JSON string the model sees as the function's output."""
        if not self.ok:
            return json.dumps({"error": self.error}, ensure_ascii=False, default=str)
        return json.dumps(self.result, ensure_ascii=False, default=str)


# --------------------------------------------------------------------------------------------------
# ToolSpec
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolSpec:
    """One callable tool. ``parameters`` is a JSON schema of type ``object`` (treat it as read-only).

    ``func`` is called with the validated arguments as keyword arguments, plus the
    :class:`ToolContext` as ``context_param`` (detected automatically for a parameter named
    ``ctx``) when set.
    """

    name: str
    description: str
    parameters: dict = field(hash=False)
    func: ToolFunc = field(repr=False)
    timeout_s: float = DEFAULT_TIMEOUT_S
    source: ToolSource = "builtin"
    server: str | None = None
    context_param: str | None = None
    _validator: Any = field(default=None, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not TOOL_NAME_RE.match(self.name):
            raise ValueError(f"invalid tool name {self.name!r}: use 1-64 characters from A-Z a-z 0-9 _ -")
        if not callable(self.func):
            raise TypeError(f"tool {self.name!r}: func must be an async callable")
        if not isinstance(self.timeout_s, int | float) or isinstance(self.timeout_s, bool):
            raise TypeError(f"tool {self.name!r}: timeout_s must be a number")
        if self.timeout_s <= 0:
            raise ValueError(f"tool {self.name!r}: timeout_s must be > 0")
        if not isinstance(self.parameters, dict) or self.parameters.get("type") != "object":
            raise ValueError(f"tool {self.name!r}: parameters must be a JSON schema with type 'object'")
        try:
            Draft202012Validator.check_schema(self.parameters)
        except SchemaError as exc:
            raise ValueError(f"tool {self.name!r}: invalid parameters schema: {exc.message}") from exc
        object.__setattr__(self, "_validator", Draft202012Validator(self.parameters))
        if self.context_param is None and "ctx" in _parameter_names(self.func):
            object.__setattr__(self, "context_param", "ctx")

    @property
    def validator(self) -> Draft202012Validator:
        return self._validator

    def to_openai(self) -> dict:
        """Chat-completions shape: ``{"type": "function", "function": {...}}``."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(self.parameters),
            },
        }

    def to_realtime(self) -> dict:
        """Realtime-API shape: ``{"type": "function", "name": ..., ...}``."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": copy.deepcopy(self.parameters),
        }


def _parameter_names(func: Callable[..., Any]) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return ()
