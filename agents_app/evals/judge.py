"""The ``judge:`` expectation: a yes/no question about the conversation, asked of the chat model.

The judge is the runtime's chat provider. The offline rules engine (``offline-rules``) is a
scripted dialog, not a model that can read a transcript, so with it every judgement is skipped
and reported as skipped (never as passed). A model's answer is parsed strictly: ``yes`` or ``no``
(case and a final full stop aside); anything else fails the expectation with the answer shown.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from voiceagent.conversation.providers import ChatProvider, ChatRequest

__all__ = ["OFFLINE", "Judge", "Verdict", "judge_for_runtime"]

OFFLINE = "offline-rules"
TIMEOUT_S = 60.0
SYSTEM = (
    "You check transcripts of phone conversations between a caller and a voice agent. You are "
    "given the conversation so far and one statement about it. Answer with exactly one word: yes "
    "if the statement is true of the conversation, no if it is not."
)


@dataclass(frozen=True)
class Verdict:
    passed: bool | None  # None: not judged (skipped)
    detail: str


class Judge:
    """Asks ``chat`` whether a statement holds for a transcript."""

    def __init__(self, chat: ChatProvider | None):
        self.chat = chat

    @property
    def skip_reason(self) -> str | None:
        if self.chat is None:
            return "no chat provider"
        if self.chat.name == OFFLINE:
            return "the chat provider is the offline rules engine (offline-rules), which cannot judge"
        return None

    async def ask(self, statement: str, transcript: str) -> Verdict:
        reason = self.skip_reason
        if reason is not None:
            return Verdict(None, reason)
        question = f"Conversation so far:\n{transcript}\n\nStatement: {statement}\n\nAnswer yes or no."
        request = ChatRequest(
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
            tools=[],
            temperature=0.0,
            max_tokens=5,
        )
        try:
            async with asyncio.timeout(TIMEOUT_S):
                answer = "".join([chunk.text async for chunk in self.chat.stream(request)])
        except Exception as exc:
            why = str(exc) or type(exc).__name__
            return Verdict(False, f"the judge ({self.chat.name}) could not answer: {why}")
        return parse_answer(answer, self.chat.name)


def parse_answer(answer: str, who: str = "the judge") -> Verdict:
    """``yes`` -> passed, ``no`` -> failed, anything else -> failed naming the answer."""
    word = answer.strip().rstrip(".!").strip().lower()
    if word == "yes":
        return Verdict(True, f"{who} answered yes")
    if word == "no":
        return Verdict(False, f"{who} answered no")
    return Verdict(False, f"{who} answered neither yes nor no: {answer.strip()[:200]!r}")


def judge_for_runtime(runtime: Any = None) -> Judge:
    """The judge on the runtime's chat provider (built from configuration when none is started)."""
    if runtime is None:
        from voiceagent.runtime import runtime
    chat = runtime.chat
    if chat is None:
        from django.conf import settings

        from voiceagent.llm.factory import build_chat_provider

        chat = build_chat_provider(settings.CONFIG)
    return Judge(chat)
