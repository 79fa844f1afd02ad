"""What the admin conversation viewer shows of one session: its transcript in order, with handoffs
between the turns and each assistant turn's stage timings as bars.

Why a module of its own: the admin class only wires the page; turning stored turns and handoff
records into rows (and the ``latency_ms`` figures into bar widths) is plain data work that the
template should not do. Bars share one scale per session, so turns can be compared at a glance.
The figures are those of :mod:`voiceagent.conversation.timing`; nothing here is re-measured.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from agents_app.models import Session

# the stages of a turn, in the order they happen, as labelled in the viewer
STAGE_LABELS = (
    ("stt", "speech to text"),
    ("llm_first_token", "first LLM token"),
    ("tts_first_audio", "first synthesised audio"),
    ("end_to_first_audio", "end of turn to first audio"),
)


# the final transcript decoded after the turn ended vs in the caller's pause (stt_pause_decode)
STT_AFTER = "speech to text (final decode after the turn ended)"
STT_IN_PAUSE = "speech to text (decoded in the caller's pause)"
STT_NOT_MEASURED = (
    "speech to text: not measured (the transcript was ready when the turn ended: decoded in the "
    "caller's pause, before this was recorded)"
)


def epoch_datetime(at: float | None) -> dt.datetime | None:
    """A stored epoch time (history turns, handoffs) as an aware datetime in the site's zone."""
    if at is None:
        return None
    try:
        return timezone.localtime(dt.datetime.fromtimestamp(float(at), tz=dt.UTC))
    except (OverflowError, OSError, ValueError):
        return None


def epoch_text(at: float | None) -> str:
    """An epoch time as an operator reads it: ``2026-11-29 03:10:05.123 UTC`` ("—" when none)."""
    when = epoch_datetime(at)
    if when is None:
        return "—"
    return f"{when:%Y-%m-%d %H:%M:%S}.{when.microsecond // 1000:03d} {when.tzname()}"


@dataclass
class Bar:
    """One stage: its figure and its width in percent of the session's longest stage."""

    key: str
    label: str
    ms: float
    width: str  # "37.5": a string, so that no locale turns the dot into a comma in CSS


@dataclass
class Row:
    """One line of the transcript: a turn (``user``, ``assistant``, ``tool``, ``system``) or a
    ``handoff``."""

    kind: str
    at: float
    agent: str = ""
    text: str = ""
    tool_name: str = ""
    handoff: dict[str, str] = field(default_factory=dict)
    bars: list[Bar] = field(default_factory=list)
    extra_ms: list[tuple[str, float]] = field(default_factory=list)  # handoff, barge_in
    usage: list[tuple[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def when(self) -> str:
        return epoch_text(self.at)

    @property
    def iso(self) -> str:
        when = epoch_datetime(self.at)
        return when.isoformat(timespec="milliseconds") if when else ""

    @property
    def clock(self) -> str:
        when = epoch_datetime(self.at)
        return f"{when:%H:%M:%S}" if when else "—"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def stt_stage(latency: dict[str, Any]) -> tuple[str, str, float] | None:
    """What speech to text really measured: the pause decode when the final transcript came from
    it; the final decode after the turn ended; nothing for a 0 that measured no decode."""
    paused, after = _number(latency.get("stt_pause_decode")), _number(latency.get("stt"))
    if paused is not None:
        return ("stt", STT_IN_PAUSE, paused)
    if after is not None and after >= 1.0:
        return ("stt", STT_AFTER, after)
    return None


def _stt_note(latency: dict[str, Any]) -> list[str]:
    stt = _number(latency.get("stt"))
    if stt is not None and stt < 1.0 and _number(latency.get("stt_pause_decode")) is None:
        return [STT_NOT_MEASURED]
    return []


def _stages(latency: dict[str, Any]) -> list[tuple[str, str, float]]:
    """(key, label, ms) of every stage that ran, then every tool call."""
    stt = stt_stage(latency)
    stages = [stt] if stt is not None else []
    stages += [
        (key, label, float(latency[key]))
        for key, label in STAGE_LABELS
        if key != "stt" and _number(latency.get(key)) is not None
    ]
    for tool in latency.get("tools") or []:
        if isinstance(tool, dict) and isinstance(tool.get("ms"), int | float):
            stages.append(("tool", f"tool {tool.get('name', '?')}", float(tool["ms"])))
    return stages


def _bars(stages: list[tuple[str, str, float]], scale: float) -> list[Bar]:
    return [
        Bar(key, label, round(ms, 1), f"{min(100.0, 100.0 * ms / scale):.1f}") for key, label, ms in stages
    ]


def conversation_rows(session: Session) -> list[Row]:
    """The session's turns and handoffs merged in time order, with bars on assistant turns."""
    turns = list(session.turns.all())
    scale = max((ms for t in turns for _k, _l, ms in _stages(t.latency_ms or {})), default=0.0) or 1.0
    rows = []
    for turn in turns:
        latency = turn.latency_ms or {}
        rows.append(
            Row(
                kind=turn.role,
                at=turn.at,
                agent=turn.agent or "",
                text=turn.content,
                tool_name=turn.tool_name or "",
                bars=_bars(_stages(latency), scale),
                extra_ms=[(k, latency[k]) for k in ("handoff", "barge_in") if latency.get(k) is not None],
                usage=[(k, v) for k, v in (turn.usage or {}).items() if v is not None],
                notes=_stt_note(latency),
            )
        )
    for record in session.handoff_records.all():
        handoff = {"from": record.from_agent, "to": record.to_agent, "type": record.type}
        rows.append(Row(kind="handoff", at=record.at, agent=record.to_agent, handoff=handoff))
    rows.sort(key=lambda row: row.at)  # stable: a turn and a handoff at the same time keep turn first
    return rows
