"""Call Automation callback events (``POST /calls/callbacks``): call state into the database.

Callbacks for one call may reach any worker (and a different one than the call's media socket),
so every effect is a conditional UPDATE on the ``Call`` row: concurrent or repeated deliveries
never regress a call's state. Events for connection ids this service does not know are logged
and otherwise ignored: the provider may still be reporting on a call from before a restart.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from django.utils import timezone

from calls import callmap
from calls.models import Call
from voiceagent.transport import control

__all__ = ["EVENT_PREFIX", "LIVE", "end_call", "process_event", "process_events", "short_type"]

logger = logging.getLogger("calls.callbacks")
EVENT_PREFIX = "Microsoft.Communication."
LIVE = ("initiating", "ringing")


def short_type(event_type: str) -> str:
    """``Microsoft.Communication.CallConnected`` -> ``CallConnected``."""
    return event_type[len(EVENT_PREFIX) :] if event_type.startswith(EVENT_PREFIX) else event_type


def _text(value: Any, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _failure_reason(data: dict[str, Any]) -> str:
    info = data.get("resultInformation")
    if not isinstance(info, dict):
        return "call failed"
    message = _text(info.get("message"), 400) or "call failed"
    codes = [str(info[k]) for k in ("code", "subCode") if isinstance(info.get(k), int)]
    return f"{message} ({'/'.join(codes)})" if codes else message


def _connected(cid: str, data: dict[str, Any]) -> None:
    now = timezone.now()
    calls = Call.objects.filter(connection_id=cid)
    calls.filter(status__in=LIVE).update(status="connected")
    calls.filter(started_at__isnull=True).update(started_at=now)
    server_call_id = _text(data.get("serverCallId"), 512)
    if server_call_id:
        calls.filter(server_call_id="").update(server_call_id=server_call_id)
    correlation_id = _text(data.get("correlationId"), 128)
    if correlation_id:
        calls.filter(correlation_id="").update(correlation_id=correlation_id)


def end_call(cid: str, status: str, reason: str = "") -> None:
    """The call is over (``disconnected``) or failed: its row ends once, its call map entry goes."""
    calls = Call.objects.filter(connection_id=cid)
    if status == "failed":
        calls.exclude(status__in=("disconnected", "failed")).update(
            status="failed", failure_reason=reason[:500]
        )
    else:
        calls.exclude(status__in=("disconnected", "failed")).update(status="disconnected")
    calls.filter(ended_at__isnull=True).update(ended_at=timezone.now())
    async_to_sync(callmap.forget)(cid)


def _participants(cid: str, data: dict[str, Any]) -> None:
    """A second participant on a call that is still ringing means the other side is on the line."""
    participants = data.get("participants")
    if isinstance(participants, list) and len(participants) >= 2:
        now = timezone.now()
        calls = Call.objects.filter(connection_id=cid, status__in=LIVE)
        calls.filter(started_at__isnull=True).update(started_at=now)
        calls.update(status="connected")


def _transfer_outcome(cid: str, name: str, data: dict[str, Any]) -> None:
    """Tell the conversation (on whichever worker holds it) how its transfer to a person went."""
    session_id = Call.objects.filter(connection_id=cid).values_list("session_id", flat=True).first()
    if name == "CallTransferAccepted":
        target = data.get("transferTarget")
        raw = _text(target.get("rawId"), 128) if isinstance(target, dict) else ""
        logger.info("call %r: transferred to a person", cid)
        action, args = "transfer_done", {"target": raw}
    else:
        reason = _failure_reason(data)
        logger.warning("call %r: transfer to a person failed: %s", cid, reason)
        action, args = "transfer_failed", {"detail": reason}
    if session_id:
        result = async_to_sync(control.request)(session_id, action, args)
        if not result.ok:
            logger.info("call %r: %s not delivered (%s)", cid, action, result.detail)


def process_event(event: dict[str, Any]) -> None:
    """Apply one validated CloudEvent (``data.callConnectionId`` is a non-empty string)."""
    data: dict[str, Any] = event["data"]
    cid: str = data["callConnectionId"]
    name = short_type(event["type"])
    if not Call.objects.filter(connection_id=cid).exists():
        logger.info("callback %s for unknown call %r: ignored", name[:80], cid)
        return
    if name == "CallConnected":
        _connected(cid, data)
    elif name == "CallDisconnected":
        end_call(cid, "disconnected")
    elif name in ("CreateCallFailed", "AnswerFailed"):
        reason = _failure_reason(data)
        logger.warning("call %r failed: %s %s", cid, name, reason)
        end_call(cid, "failed", reason)
    elif name == "ParticipantsUpdated":
        _participants(cid, data)
    elif name == "ContinuousDtmfRecognitionToneReceived":
        tone_info = data.get("toneInfo")
        tone = tone_info.get("tone") if isinstance(tone_info, dict) else None
        tone = tone if isinstance(tone, str) else data.get("tone")
        # the media stream carries DTMF to the conversation engine; this is the audit trail
        logger.info("call %r: DTMF tone %r", cid, _text(tone, 16) or None)
    elif name in ("CallTransferAccepted", "CallTransferFailed"):
        _transfer_outcome(cid, name, data)
    elif name == "MediaStreamingFailed":
        logger.warning("call %r: media streaming failed: %s", cid, _failure_reason(data))
    else:
        logger.debug("call %r: callback %s", cid, name[:80])


def process_events(events: list[dict[str, Any]]) -> int:
    """Apply validated events in order; returns how many were processed."""
    for event in events:
        process_event(event)
    return len(events)
