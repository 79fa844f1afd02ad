"""What one session may define for itself through the REST API (README, Production).

Session-scoped agents and scenarios live in the session's state, which every turn of that session
loads from the shared cache: without a bound, one API key could store 150 agents with 19 KB prompts
in a session (accepted in 4 s) and make each of its turns read megabytes. So a session holds at
most :data:`MAX_SESSION_AGENTS` agents and :data:`MAX_SESSION_SCENARIOS` scenarios of its own, and
a session agent's prompt is at most :data:`MAX_PROMPT_CHARS` characters (the built-in prompts are
under 3 000). A refusal is a 400 naming the limit.
"""

from __future__ import annotations

from voiceagent.conversation.session import SessionState
from voiceagent.errors import ApiError

MAX_SESSION_AGENTS = 10
MAX_SESSION_SCENARIOS = 10
MAX_PROMPT_CHARS = 8_000


def check_room(state: SessionState, kind: str) -> None:
    """Raise a 400 when the session already holds its limit of ``kind`` ("agents"/"scenarios")."""
    held = state.agents if kind == "agents" else state.scenarios
    limit = MAX_SESSION_AGENTS if kind == "agents" else MAX_SESSION_SCENARIOS
    if len(held) >= limit:
        raise ApiError(
            f"This session already has {len(held)} {kind} of its own, the limit; reset the session "
            f"or reuse one (PUT) instead.",
            400,
            {"session_id": [f"at most {limit} {kind} per session"]},
        )
