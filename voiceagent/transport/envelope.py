"""The server message envelope (CONTRACTS "WebSocket envelope") and the engine events in it.

One format for what a session tells the dashboards, whatever its wire: the browser socket sends it
to its client as is, and every transport relays it (:mod:`voiceagent.transport.relay`), so the
dashboard reads a phone call or an AudioHook session the same way as a browser conversation.
"""

from __future__ import annotations

import time
from typing import Any

from voiceagent.conversation.events import Event


def envelope(session_id: str | None, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
    """``{"type", "payload", "session_id", "ts"}``: one server message."""
    return {"type": type_, "payload": payload, "session_id": session_id, "ts": round(time.time(), 3)}


def event_payload(event: Event) -> tuple[str, dict[str, Any]] | None:
    """Engine event -> (message type, payload); ``Audio`` is each wire's own business."""
    kind = event.kind
    if kind == "Transcript":
        return "transcript", {"text": event.text, "final": event.final, "speaker": event.speaker}
    if kind == "AgentResponse":
        response = {"text": event.text, "agent": event.agent, "final": event.final}
        return "response", {**response, "by": event.by} if event.by else response
    if kind == "TransferRequested":  # the target stays on the server
        return "event", {
            "name": "transfer_requested",
            "reason": event.reason,
            "priority": event.priority,
            "reference": event.reference,
        }
    if kind == "Takeover":
        return "event", {"name": "takeover" if event.active else "handback", "by": event.by}
    if kind == "StopAudio":
        return "event", {"name": "barge_in", "reason": event.reason}
    if kind == "Duck":  # the page lowers (or restores) the gain of the audio it has not played
        return "event", {"name": "duck", "gain_db": event.gain_db}
    if kind == "Handoff":
        return "event", {
            "name": "handoff",
            "from": event.from_agent,
            "to": event.to_agent,
            "type": event.type,
            "tool": event.tool,
        }
    if kind == "ToolCall":
        call = {
            "name": event.name,
            "args": event.arguments,
            "result": event.result,
            "duration_ms": event.duration_ms,
        }
        return "event", {
            "name": "tool_call",
            "tool": event.name,
            "args": event.arguments,
            "result": event.result,
            "duration_ms": event.duration_ms,
            "ok": event.ok,
            "agent": event.agent,
            "tool_call": call,
        }
    if kind == "StateChange":
        return "event", {"name": "state", "state": event.state, "agent": event.agent}
    if kind == "Error":
        return "error", {"code": event.code, "message": event.message}
    if kind == "TurnMetrics":
        return "turn_metrics", {
            "turn_index": event.turn_index,
            "agent": event.agent,
            "latency_ms": event.latency_ms,
            "usage": event.usage,
        }
    return None
