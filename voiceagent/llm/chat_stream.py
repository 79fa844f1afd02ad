"""Assembling a streamed ``chat.completions`` response from its JSON chunks, as the server sent them.

Why plain JSON and not the SDK's ``ChatCompletionChunk`` models: building a pydantic model per
chunk (``construct_type`` over nested choices, deltas and tool calls) was ~6 % of a server's CPU at
200 conversations (bench/bench_capacity.py --mode cloud, py-spy), on the event loop, between the
first token and the first audio. The ``openai`` client still does everything else: auth, Azure
routes, retries, timeouts, SSE decoding and the in-stream ``{"error": ...}`` event (raised as
``openai.APIError``). What we read of a chunk is small and checked here: a chunk of the wrong shape
raises ``TypeError``, which the provider reports as a malformed response.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from voiceagent.conversation.providers import ChatChunk, ChatUsage, ToolCallRequest

__all__ = ["ChunkAssembler"]


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class ChunkAssembler:
    """Feeds on the chunks of one streamed completion; text comes out as it arrives, tool calls
    (accumulated by their ``index``) and the finish reason and usage once the stream has ended."""

    def __init__(self) -> None:
        self._calls: dict[int, _PartialCall] = {}
        self.finish_reason: str | None = None
        self.usage: ChatUsage | None = None

    def feed(self, chunk: Any) -> str:
        """The text delta of ``chunk`` (``""`` when it holds none); ``TypeError`` when malformed."""
        if not isinstance(chunk, Mapping):
            raise TypeError("a chunk is not a JSON object")
        usage = chunk.get("usage")
        if usage:  # the last chunk (stream_options.include_usage), its choices empty
            self.usage = ChatUsage(_count(usage, "prompt_tokens"), _count(usage, "completion_tokens"))
        text = ""
        for choice in _items(chunk.get("choices")):
            if choice.get("index") not in (0, None):
                continue
            delta = choice.get("delta")
            if delta:
                if not isinstance(delta, Mapping):
                    raise TypeError("a delta is not a JSON object")
                text += _text(delta.get("content"))
                for position, call in enumerate(_items(delta.get("tool_calls"))):
                    self._accumulate(position, call)
            reason = choice.get("finish_reason")
            if reason:
                self.finish_reason = _text(reason)
        return text

    def finish(self) -> list[ChatChunk]:
        """The closing chunks: the complete tool calls, if any, then ``done``."""
        chunks: list[ChatChunk] = []
        if self._calls:
            chunks.append(ChatChunk(tool_calls=[_complete(self._calls[i]) for i in sorted(self._calls)]))
            self.finish_reason = self.finish_reason or "tool_calls"
        chunks.append(ChatChunk(done=True, finish_reason=self.finish_reason or "stop", usage=self.usage))
        return chunks

    def _accumulate(self, position: int, delta: Mapping[str, Any]) -> None:
        index = delta.get("index")
        call = self._calls.setdefault(index if isinstance(index, int) else position, _PartialCall())
        if delta.get("id") and not call.id:
            call.id = _text(delta["id"])
        function = delta.get("function")
        if not function:
            return
        if not isinstance(function, Mapping):
            raise TypeError("a tool call's function is not a JSON object")
        name = _text(function.get("name"))
        if name:
            # OpenAI sends the name once; a few servers repeat it in every delta, some split it.
            if not call.name:
                call.name = name
            elif name != call.name:
                call.name += name
        arguments = _text(function.get("arguments"))
        if arguments:
            call.arguments.append(arguments)


def _items(value: Any) -> list[Mapping[str, Any]]:
    """A JSON array of objects (``None`` as empty)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        raise TypeError("expected a JSON array of objects")
    return value


def _text(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError("expected a JSON string")
    return value


def _count(usage: Any, key: str) -> int:
    if not isinstance(usage, Mapping):
        raise TypeError("usage is not a JSON object")
    value = usage.get(key) or 0
    if not isinstance(value, int):
        raise TypeError("a token count is not an integer")
    return value


def _complete(call: _PartialCall) -> ToolCallRequest:
    arguments = "".join(call.arguments).strip() or "{}"
    return ToolCallRequest(id=call.id or f"call_{uuid.uuid4().hex[:24]}", name=call.name, arguments=arguments)
