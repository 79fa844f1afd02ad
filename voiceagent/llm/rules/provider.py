"""The chat-provider face of the rules engine: :class:`RulesChat` (``"offline-rules"``).

What the runtime builds when no language model is configured: it loads the scenario's dialog,
lets the matcher decide the round, and streams the decision as a model would (the reply in
word-boundary chunks so clause-based TTS streaming is exercised, then the tool calls, then done).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from voiceagent.conversation.providers import ChatChunk, ChatRequest, ProviderError, ToolCallRequest
from voiceagent.llm.rules.dialog import Dialog, DialogError
from voiceagent.llm.rules.loader import DIALOG_DIR, dialog_scenarios, generic_dialog, load_dialog
from voiceagent.llm.rules.matcher import RENDER_ERRORS, Decision, decide

logger = logging.getLogger(__name__)

__all__ = ["RulesChat"]


class RulesChat:
    """The deterministic offline dialog engine (see :mod:`voiceagent.llm.rules` for the file format)."""

    name = "offline-rules"

    def __init__(
        self, dialog_dir: str | Path | None = None, words_per_chunk: int = 4, chunk_delay: float = 0.0
    ) -> None:
        self.dialog_dir = Path(dialog_dir) if dialog_dir is not None else DIALOG_DIR
        self.words_per_chunk = max(1, int(words_per_chunk))
        self.chunk_delay = float(chunk_delay)
        self._generic: Dialog = generic_dialog()

    # --- dialogs -----------------------------------------------------------------------------------
    def dialog(self, scenario: str) -> Dialog:
        """The parsed dialog of ``scenario`` (see :func:`~voiceagent.llm.rules.loader.load_dialog`)."""
        return load_dialog(self.dialog_dir, scenario)

    def scenarios(self) -> list[str]:
        """The scenarios that have a dialog file."""
        return dialog_scenarios(self.dialog_dir)

    # --- ChatProvider ------------------------------------------------------------------------------
    async def warm(self) -> bool:
        """Load and validate every dialog file; False (logged) if one is invalid."""
        ok = True
        for scenario in self.scenarios():
            try:
                self.dialog(scenario)
            except DialogError as exc:
                logger.error("offline dialog invalid: %s", exc)
                ok = False
        return ok

    async def close(self) -> None:
        return None

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        try:
            dialog = self.dialog(request.scenario)
        except DialogError as exc:
            raise ProviderError(f"offline dialog invalid: {exc}") from None
        try:
            decision = self.decide(request, dialog)
        except RENDER_ERRORS as exc:
            raise ProviderError(f"offline dialog failed: {type(exc).__name__}: {exc}") from None
        if decision.reply:
            for piece in self._pieces(decision.reply):
                yield ChatChunk(text=piece)
                await asyncio.sleep(self.chunk_delay)
        if decision.calls:
            yield ChatChunk(tool_calls=self._tool_calls(request, decision.calls))
            yield ChatChunk(done=True, finish_reason="tool_calls")
        else:
            yield ChatChunk(done=True, finish_reason="stop")

    def decide(self, request: ChatRequest, dialog: Dialog | None = None) -> Decision:
        """What the agent says and calls this round (pure: no I/O once the dialog is loaded)."""
        return decide(request, dialog or self.dialog(request.scenario), self._generic)

    # --- output ------------------------------------------------------------------------------------
    def _pieces(self, reply: str) -> list[str]:
        words = reply.split(" ")
        n = self.words_per_chunk
        pieces = [" ".join(words[i : i + n]) for i in range(0, len(words), n)]
        return [p + " " for p in pieces[:-1]] + pieces[-1:]

    @staticmethod
    def _tool_calls(request: ChatRequest, calls: list[tuple[str, dict[str, Any]]]) -> list[ToolCallRequest]:
        out = []
        for index, (name, args) in enumerate(calls):
            arguments = json.dumps(args, ensure_ascii=False, sort_keys=True)
            seed = f"{request.scenario}:{request.agent}:{len(request.messages)}:{index}:{name}:{arguments}"
            call_id = "call_" + hashlib.sha256(seed.encode()).hexdigest()[:24]
            out.append(ToolCallRequest(id=call_id, name=name, arguments=arguments))
        return out
