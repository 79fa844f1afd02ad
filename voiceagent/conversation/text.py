"""Streaming text helpers: split LLM deltas into speakable clauses as they arrive."""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"([.!?;:…])(\s+|$)")
_SOFT_BREAK = re.compile(r"([,\u2014\u2013])\s+")  # comma, em dash, en dash


class ClauseSplitter:
    """Accumulates text deltas and releases whole clauses, so TTS can start before the LLM ends.

    A clause ends at sentence punctuation followed by whitespace; a long run without one is cut
    at a comma or dash once it passes ``soft_limit`` characters, and anywhere at a space past
    ``hard_limit`` so a comma-less monologue still streams.

    The FIRST clause is cut sooner: at a comma or dash once the text passes ``first_soft_limit``
    characters (the comma at least ``min_first_soft`` in). The caller waits for its audio, and a
    neural voice synthesises a clause whole, in time that grows with its length (Piper: 66
    characters took four times as long as 17 before the first sample); later clauses are
    synthesised while the earlier ones play, so they keep the longer, better-phrased cut.
    """

    def __init__(
        self,
        soft_limit: int = 60,
        hard_limit: int = 160,
        min_chars: int = 2,
        min_soft: int = 20,
        first_soft_limit: int = 24,
        min_first_soft: int = 12,
    ):
        self.soft_limit = soft_limit
        self.min_soft = min_soft
        self.hard_limit = hard_limit
        self.min_chars = min_chars
        self.first_soft_limit = first_soft_limit
        self.min_first_soft = min_first_soft
        self._released = False  # a clause went out: the rest are cut at the normal limits
        self._buffer = ""

    def push(self, delta: str) -> list[str]:
        """Add a delta; return the clauses it completed (possibly none)."""
        self._buffer += delta
        out: list[str] = []
        while True:
            cut = self._cut_point()
            if cut is None:
                return out
            clause, self._buffer = self._buffer[:cut].strip(), self._buffer[cut:].lstrip()
            if len(clause) >= self.min_chars:
                out.append(clause)
                self._released = True

    def _cut_point(self) -> int | None:
        sentence = next((m.end() for m in _SENTENCE_END.finditer(self._buffer) if m.group(2)), None)
        if not self._released and (sentence or len(self._buffer)) > self.first_soft_limit:
            for match in _SOFT_BREAK.finditer(self._buffer, 0, sentence or len(self._buffer)):
                if match.end() >= self.min_first_soft:
                    return match.end()  # a long first clause: its first comma is the first cut
        if sentence is not None:
            return sentence
        if len(self._buffer) > self.soft_limit:
            for match in _SOFT_BREAK.finditer(self._buffer):
                if match.end() >= self.min_soft:
                    return match.end()
        if len(self._buffer) > self.hard_limit:
            space = self._buffer.rfind(" ", 0, self.hard_limit)
            return space + 1 if space > 0 else self.hard_limit
        return None

    def flush(self) -> list[str]:
        """The remainder at the end of the stream."""
        rest, self._buffer = self._buffer.strip(), ""
        return [rest] if len(rest) >= self.min_chars else []
