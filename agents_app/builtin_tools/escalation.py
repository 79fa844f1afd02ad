"""Leaving the assistant: a transfer to a human queue, or the end of the call.

Memory keys written: ``escalation``, ``transfer`` (``status`` "requested": the conversation hands
it to its transport once the agent's line has been said, see voiceagent.conversation.takeover),
``conversation_ended`` and ``end_reason``.
"""

from __future__ import annotations

import logging
import time
from typing import Literal

from agents_app.builtin_tools.caller import digest, reference
from voiceagent.conversation.tools import ToolContext

logger = logging.getLogger(__name__)


async def escalate_to_human(
    ctx: ToolContext, reason: str, priority: Literal["normal", "high"] = "normal"
) -> dict:
    """Transfer the caller to a human agent's queue.
    Use it when the caller asks for a person, is very upset, or needs something no assistant can
    do. Tell the caller the estimated wait from the result.

    Args:
        reason: A short summary of what the caller needs, for the human agent.
        priority: "high" for urgent cases such as money being moved out by someone else.
    """
    memory = ctx.memory
    existing = memory.get("escalation")
    if isinstance(existing, dict) and (existing.get("priority") == "high" or priority == "normal"):
        again = _request_transfer(memory, existing)  # a transfer that failed is tried again
        return {**existing, "escalated": True, "already_escalated": True, **again}
    seed = int(digest("queue", ctx.session_id)[:8], 16)
    position = 1 + seed % 2 if priority == "high" else 2 + seed % 5
    escalation = {
        "reference": reference("ESC-", ctx.session_id),
        "reason": " ".join((reason or "").split()) or "caller asked for a person",
        "priority": priority,
        "queue_position": position,
        "estimated_wait_minutes": position * (2 if priority == "high" else 3),
        "authenticated": memory.get("authenticated") is True,
        "requested_at": time.time(),
    }
    memory["escalation"] = escalation
    transfer = _request_transfer(memory, escalation)
    logger.info("session %s: escalated to a human (%s priority)", ctx.session_id, priority)
    return {**escalation, "escalated": True, "already_escalated": False, **transfer}


def _request_transfer(memory: dict, escalation: dict) -> dict:
    """Mark the transfer requested (the conversation hands it to its transport after this turn),
    unless one is under way already; ``{"transfer": status}`` for the tool's result."""
    transfer = memory.get("transfer")
    if isinstance(transfer, dict) and transfer.get("status") not in ("failed", None):
        return {"transfer": transfer["status"]}
    memory["transfer"] = {
        "status": "requested",
        "reason": escalation["reason"],
        "priority": escalation["priority"],
        "reference": escalation["reference"],
        "requested_at": time.time(),
    }
    return {"transfer": "requested"}


async def end_conversation(ctx: ToolContext, reason: str = "completed") -> dict:
    """End the call after saying goodbye.

    Args:
        reason: Why the conversation ends, for example "completed" or "caller_request".
    """
    text = " ".join((reason or "").split()) or "completed"
    ctx.memory["conversation_ended"] = True
    ctx.memory["end_reason"] = text
    return {"ended": True, "reason": text}
