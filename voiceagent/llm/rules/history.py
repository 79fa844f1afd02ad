"""The dialog state of one conversation, as the rules engine sees it: read from the request.

The engine is stateless: everything it knows about the conversation so far (the caller's
utterances, the last tool round, each tool's newest result, the agent's previous reply) is read
again from ``ChatRequest.messages`` every round, exactly as a language model would see it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from voiceagent.llm.rules.spoken import normalize

__all__ = ["History", "offered_names"]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return " ".join(parts)
    return ""


def _parse_result(content: Any) -> Any:
    text = _content_text(content)
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return {"text": text}


# How the engine replays a tool result of an earlier turn (a system message).
_EARLIER_RESULT_RE = re.compile(
    r"^Earlier, tool (?P<name>[A-Za-z0-9_-]{1,64}) returned: (?P<content>.*)$", re.DOTALL
)


@dataclass
class History:
    """What the rules need from ``request.messages``."""

    user_texts: list[str]  # normalised, oldest first
    user_raw: list[str]
    last_role: str | None
    trailing_results: list[tuple[str, Any]]  # (tool name, parsed result) of the last round
    results_by_tool: dict[str, Any]  # newest result of each tool in the conversation
    last_reply: str

    @classmethod
    def read(cls, messages: list[dict[str, Any]]) -> History:
        """Read an OpenAI-format message list (malformed entries are skipped)."""
        names: dict[str, str] = {}
        user_texts: list[str] = []
        user_raw: list[str] = []
        results_by_tool: dict[str, Any] = {}
        last_reply = ""
        for message in messages:
            if not isinstance(message, Mapping):
                continue
            role = message.get("role")
            if role == "user":
                raw = _content_text(message.get("content"))
                user_raw.append(raw)
                user_texts.append(normalize(raw))
            elif role == "assistant":
                text = _content_text(message.get("content")).strip()
                if text:
                    last_reply = text
                for call in message.get("tool_calls") or ():
                    if isinstance(call, Mapping):
                        function = call.get("function") or {}
                        names[str(call.get("id"))] = str(function.get("name") or call.get("name") or "")
            elif role == "tool":
                name = names.get(str(message.get("tool_call_id")), "") or str(message.get("name") or "")
                results_by_tool[name] = _parse_result(message.get("content"))
            elif role == "system":  # results of earlier turns, as the engine replays them
                match = _EARLIER_RESULT_RE.match(_content_text(message.get("content")))
                if match:
                    results_by_tool[match.group("name")] = _parse_result(match.group("content"))
        trailing: list[tuple[str, Any]] = []
        for message in reversed(messages):
            if not isinstance(message, Mapping) or message.get("role") != "tool":
                break
            name = names.get(str(message.get("tool_call_id")), "") or str(message.get("name") or "")
            trailing.append((name, _parse_result(message.get("content"))))
        trailing.reverse()
        last = messages[-1] if messages and isinstance(messages[-1], Mapping) else {}
        return cls(
            user_texts=user_texts,
            user_raw=user_raw,
            last_role=last.get("role"),
            trailing_results=trailing,
            results_by_tool=results_by_tool,
            last_reply=last_reply,
        )


def offered_names(tools: list[dict[str, Any]]) -> set[str]:
    """The names of the tools a request offers (OpenAI ``function`` or flat shape)."""
    names = set()
    for tool in tools or ():
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function")
        name = function.get("name") if isinstance(function, Mapping) else tool.get("name")
        if isinstance(name, str):
            names.add(name)
    return names
