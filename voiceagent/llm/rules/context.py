"""The names the dialog templates see: the caller's words, memory, and the matching functions.

``said``, ``find``, ``last_result``, ``offered``, ``card``, ``chosen_card`` and ``pick`` are how a
dialog file matches intents and extracts entities (card numbers, ordinals) beyond a rule's own
regex; they close over this round's :class:`History` and ``ChatRequest.memory``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from voiceagent.conversation.providers import ChatRequest
from voiceagent.llm.rules.history import History
from voiceagent.llm.rules.spoken import keypad_entry, normalize, spoken_digits

__all__ = ["template_context"]

_ORDINAL_INDEX = [
    (re.compile(r"\b(last|final)\b"), -1),
    (re.compile(r"\b(first|number one|1st)\b"), 0),
    (re.compile(r"\b(second|number two|2nd)\b"), 1),
    (re.compile(r"\b(third|number three|3rd)\b"), 2),
    (re.compile(r"\b(fourth|number four|4th)\b"), 3),
    (re.compile(r"\b(fifth|number five|5th)\b"), 4),
]


def template_context(
    request: ChatRequest, conv: History, offered: set[str], patterns: dict[str, str]
) -> dict[str, Any]:
    """The names every template and ``when`` expression of this round sees (before a rule adds
    ``groups``, or an after_tool round adds ``tool``, ``result`` and ``results``)."""
    text = conv.user_texts[-1] if conv.user_texts else ""
    raw = conv.user_raw[-1] if conv.user_raw else ""
    keypad = keypad_entry(raw)
    memory = request.memory if isinstance(request.memory, Mapping) else {}
    profile = memory.get("caller_profile") if isinstance(memory.get("caller_profile"), Mapping) else {}
    cards = [c for c in profile.get("cards") or [] if isinstance(c, Mapping)]

    def said(pattern: Any) -> bool:
        regex = pattern if isinstance(pattern, re.Pattern) else re.compile(str(pattern), re.IGNORECASE)
        return any(regex.search(t) for t in conv.user_texts)

    def find(pattern: str) -> dict[str, str]:
        regex = re.compile(str(pattern), re.IGNORECASE)
        for utterance in reversed(conv.user_texts):
            match = regex.search(utterance)
            if match:
                found = {k: v or "" for k, v in match.groupdict().items()}
                return {"match": match.group(0), "utterance": utterance, **found}
        return {}

    def last_result(tool: str) -> Any:
        return conv.results_by_tool.get(tool, {})

    def card(kind_or_last4: Any) -> Mapping[str, Any]:
        key = str(kind_or_last4 or "").strip().lower()
        if not key:
            return {}
        for c in cards:
            if str(c.get("last4")) == key or str(c.get("type", "")).lower() == key:
                return c
        return {}

    def chosen_card() -> Mapping[str, Any]:
        for utterance in reversed(conv.user_texts):
            number = spoken_digits(utterance)
            if len(number) >= 4 and re.search(r"\b(ending|ends|last four|card|keypad entry)\b", utterance):
                found = card(number[-4:])
                if found:
                    return found
            for kind in ("credit", "debit"):
                if re.search(rf"\b{kind}\b", utterance) and card(kind):
                    return card(kind)
        return cards[0] if len(cards) == 1 else {}

    def pick(items: Any, utterance: str | None = None) -> Any:
        items = list(items) if isinstance(items, list | tuple) else []
        words = normalize(utterance) if utterance is not None else text
        for regex, index in _ORDINAL_INDEX:
            if regex.search(words) and -len(items) <= index < len(items):
                return items[index]
        return {}

    return {
        "agent": request.agent,
        "scenario": request.scenario,
        "memory": memory,
        "text": text,
        "raw": raw,
        "digits": keypad or spoken_digits(text),
        "keypad": keypad,
        "groups": {},
        "result": {},
        "results": {},
        "tool": "",
        "patterns": patterns,
        "last_reply": conv.last_reply,
        "said": said,
        "find": find,
        "last_result": last_result,
        "offered": lambda name: name in offered,
        "card": card,
        "chosen_card": chosen_card,
        "pick": pick,
    }
