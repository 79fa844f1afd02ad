"""The demo caller: a session with no caller profile gets one when the caller says it is them.

The offline banking dialog promises "In this demo you can also just say: yes, that's me". That
shortcut verifies the caller as the session's profile, but the web page and a demo phone call
never make one (``POST /api/v1/profiles/generate`` is a separate step), so the promise could not
be kept. This tool gives such a session its demo caller, drawn from a seed derived from the session
id (the same caller every time for one session); it verifies nobody: the dialog then calls
``verify_client_identity`` with that caller's details, and the one-time code still follows.
"""

from __future__ import annotations

import logging

from agents_app.builtin_tools.caller import caller_profile, digest
from agents_app.profiles import SCENARIOS, generate_profile, profile_memory
from voiceagent.conversation.tools import ToolContext

logger = logging.getLogger(__name__)


def demo_seed(session_id: str) -> int:
    """The seed of a session's demo caller: stable for the session, different across sessions."""
    return int(digest("demo-caller", session_id)[:8], 16)


async def attach_demo_caller(ctx: ToolContext) -> dict:
    """Demo only: make the caller the session's demo customer when the session has no caller profile
    yet (the caller said "yes, that's me"). It does not verify them: call verify_client_identity next.
    """
    profile = caller_profile(ctx)
    if profile is not None:
        return {"attached": False, "reason": "the session already has a caller profile"}
    scenario = ctx.scenario if ctx.scenario in SCENARIOS else "banking"
    profile = generate_profile(seed=demo_seed(ctx.session_id), scenario=scenario)
    ctx.memory.update(profile_memory(profile))
    logger.info("session %s: demo caller attached (profile %s)", ctx.session_id, profile["id"])
    return {"attached": True, "full_name": profile["full_name"], "profile_id": profile["id"]}
