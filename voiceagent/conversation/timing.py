"""Per-turn timings and usage: the one source of turn latency every observer reads.

Why here: an operator must be able to tell why a turn felt slow and what it cost, and metrics,
traces and the admin viewer must all agree on it. So both pipelines mark, on the loop's monotonic
clock (``loop.time()``), the points they already pass once per turn - never per frame - and
everything else is derived from those marks in one place.

A :class:`TurnTiming` opens at the end of the caller's turn (end of speech: the VAD in the cascade,
``speech_stopped`` of the server VAD in live; or typed text and keypad entry, which have no speech
stage) or, for a line the agent begins itself (the greeting), lazily at its first mark. It closes
when its assistant turn is committed to the history: :meth:`TurnTiming.result` gives the
``latency_ms`` and ``usage`` stored with that turn, emitted as a ``TurnMetrics`` event and handed
to every function registered with :func:`observe` (Prometheus, OpenTelemetry, ...). A turn that
never reaches an assistant turn (nothing was said) is not reported.

``latency_ms`` (milliseconds, ``None`` where the stage did not run):

- ``stt``: final transcript - end of speech (typed text: ``None``). When the recogniser decoded
  the final transcript in the caller's pause, before the turn ended, this is ~0 and the decode's
  own time is
- ``stt_pause_decode``: that pause decode (asked - answered; or asked - final transcript when the
  turn ended while it ran); ``None`` when the final transcript was decoded after the turn ended
- ``llm_first_token``: first chunk of the first model round - its request (live: ``None``, no
  separate model stage)
- ``tts_first_audio``: first synthesised audio - first clause sent to synthesis (live: ``None``)
- ``end_to_first_audio``: first audio of the response put on the event channel - end of the
  caller's turn (end of speech, or the arrival of typed text; the greeting: ``None``)
- ``tools``: ``[{"name", "ms"}]`` per tool call; ``handoff``: handoff tool call -> the new agent's
  context ready; ``barge_in``: caller speech detected -> ``StopAudio`` queued, on the interrupted turn.

``usage`` (``None`` where not reported or not applicable): ``llm_tokens_in``/``llm_tokens_out`` as
the chat provider or realtime service reports them (the offline rules engine reports none: it is
no language model, and a word count would pretend to be tokens), ``stt_audio_s`` (seconds of
caller audio recognised: the utterance fed to STT, or the server VAD's speech span),
``tts_chars`` (characters sent to synthesis), ``realtime_audio_in_s``/``realtime_audio_out_s``
(live: the caller's speech span and the agent audio received).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("voiceagent.conversation.timing")

STAGES = ("stt", "llm_first_token", "tts_first_audio", "end_to_first_audio")
USAGE_KEYS = (
    "llm_tokens_in",
    "llm_tokens_out",
    "stt_audio_s",
    "tts_chars",
    "realtime_audio_in_s",
    "realtime_audio_out_s",
)
# stage -> (from mark, to mark)
_SPANS = {
    "stt": ("speech_end", "transcript"),
    "llm_first_token": ("llm_request", "llm_first_token"),
    "tts_first_audio": ("tts_request", "tts_first_audio"),
    "end_to_first_audio": ("turn_end", "first_audio_out"),
    "stt_pause_decode": ("pause_decode_start", "pause_decode_end"),
}


@dataclass
class TurnReport:
    """A closed turn, as observers get it: the figures, and the raw marks (loop time) for traces."""

    session_id: str
    transport: str | None
    agent: str | None
    turn_index: int
    latency_ms: dict[str, Any]
    usage: dict[str, Any]
    marks: dict[str, float]


Observer = Callable[[TurnReport], None]
_observers: list[Observer] = []


def observe(observer: Observer) -> Callable[[], None]:
    """Call ``observer`` with every closed turn of this process; returns the unsubscribe function.
    Observers run on the event loop, inline: they must be quick and must not raise (a raise is
    logged and ignored, never reaches the conversation)."""
    _observers.append(observer)
    return lambda: _observers.remove(observer) if observer in _observers else None


def notify(report: TurnReport) -> None:
    for observer in list(_observers):
        try:
            observer(report)
        except Exception:
            logger.exception("turn observer %r failed", observer)


def _ms(start: float | None, end: float | None) -> float | None:
    if start is None or end is None:
        return None
    return round(max(0.0, end - start) * 1000.0, 1)


@dataclass
class TurnTiming:
    """One turn's marks (loop time, s) and usage counters; each mark keeps its first value."""

    marks: dict[str, float] = field(default_factory=dict)
    tools: list[dict[str, Any]] = field(default_factory=list)
    handoff_ms: float | None = None
    barge_in_ms: float | None = None
    usage: dict[str, float | int | None] = field(default_factory=lambda: dict.fromkeys(USAGE_KEYS))
    closed: bool = False

    def mark(self, name: str, at: float) -> None:
        """Record ``name`` at ``at`` unless it was recorded already this turn."""
        if name not in self.marks:
            self.marks[name] = at

    def pause_decode(self, start: float, end: float | None) -> None:
        """The final transcript came from a decode asked for in the caller's pause."""
        self.mark("pause_decode_start", start)
        if end is not None:
            self.mark("pause_decode_end", end)

    def add(self, key: str, amount: float | int | None) -> None:
        """Add to a usage counter (``None`` leaves it as it is: not reported)."""
        if amount is not None:
            self.usage[key] = (self.usage[key] or 0) + amount

    def tool(self, name: str, ms: float, at: float | None = None) -> None:
        """A tool call of ``ms``; ``at`` (its end, loop time) becomes the mark ``tool_end_<n>``."""
        self.tools.append({"name": name, "ms": round(ms, 1)})
        if at is not None:
            self.marks[f"tool_end_{len(self.tools)}"] = at

    def result(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(``latency_ms``, ``usage``) as stored with the history turn."""
        marks = self.marks
        latency: dict[str, Any] = {k: _ms(marks.get(a), marks.get(b)) for k, (a, b) in _SPANS.items()}
        latency["tools"] = list(self.tools)
        latency["handoff"] = self.handoff_ms
        latency["barge_in"] = self.barge_in_ms
        usage = {k: round(v, 3) if isinstance(v, float) else v for k, v in self.usage.items()}
        return latency, usage


class TurnClock:
    """A conversation's turns being measured: the one the caller's turn opened, marks go there."""

    def __init__(self) -> None:
        self.pending: TurnTiming | None = None  # the turn in progress (not yet committed)
        self.heard: TurnTiming | None = None  # the last caller turn (its transcript may come late)
        self.closed_count = 0

    def user_turn(self, at: float, *, speech: bool, audio_s: float | None = None) -> TurnTiming:
        """The caller's turn ended at ``at`` (end of speech, or typed text): a new turn opens."""
        timing = self.pending = self.heard = TurnTiming()
        timing.mark("turn_end", at)
        if speech:
            timing.mark("speech_end", at)
            timing.add("stt_audio_s", audio_s)
        return timing

    def transcribed(self, at: float, *, decode_started: float | None = None) -> None:
        """The final transcript of the caller's last utterance; ``decode_started``: its decode was
        asked for in the caller's pause (the turn ended while it ran)."""
        if self.heard is not None and "speech_end" in self.heard.marks:
            self.heard.mark("transcript", at)
            if decode_started is not None:
                self.heard.pause_decode(decode_started, at)

    def current(self) -> TurnTiming:
        """The turn in progress; one the agent began itself when the caller has not spoken since."""
        if self.pending is None or self.pending.closed:
            self.pending = TurnTiming()
        return self.pending

    def close(self, timing: TurnTiming | None) -> TurnTiming:
        """The committed turn's timing (closed); a second commit of it gets an empty one, so that
        nothing is counted twice."""
        if timing is None or timing.closed:
            timing = TurnTiming()
        timing.closed = True
        self.closed_count += 1
        if self.pending is timing:
            self.pending = None
        return timing
