"""The caller a built-in tool serves, the refusals every tool shares, and deterministic references.

The caller is the profile :func:`agents_app.profiles.profile_memory` put in the session memory as
``memory["caller_profile"]``; the tools read nothing else, so results are deterministic.
"""

from __future__ import annotations

import hashlib
import re

from voiceagent.conversation.tools import ToolContext

NOT_AUTHENTICATED: dict[str, str] = {
    "error": "not_authenticated",
    "message": "The caller must be verified first (verify_client_identity, then the MFA code).",
}
NO_PROFILE_REASON = "no caller profile on this session; generate one with POST /api/v1/profiles/generate"


def caller_profile(ctx: ToolContext) -> dict | None:
    """The session's caller profile, or ``None`` when none was generated for it."""
    profile = ctx.memory.get("caller_profile")
    return profile if isinstance(profile, dict) else None


def no_profile() -> dict:
    """The result a tool returns when the session has no caller profile."""
    return {"error": "no_caller_profile", "message": NO_PROFILE_REASON}


def authenticated_profile(ctx: ToolContext) -> tuple[dict | None, dict | None]:
    """``(profile, None)`` when the caller is authenticated, else ``(None, result to return)``."""
    if ctx.memory.get("authenticated") is not True:
        return None, dict(NOT_AUTHENTICATED)
    profile = caller_profile(ctx)
    if profile is None:
        return None, no_profile()
    return profile, None


def digest(*parts: object) -> str:
    """A stable SHA-256 hex digest of ``parts``, the seed of references and code hashes."""
    return hashlib.sha256(":".join(str(p) for p in parts).encode()).hexdigest()


def reference(prefix: str, *parts: object) -> str:
    """A short deterministic reference such as ``"BLK-1A2B3C4D"``, the same for the same parts."""
    return prefix + digest(*parts)[:8].upper()


# How the engine words a keypad entry as a caller turn ("Keypad entry: 482913"); a model may pass it on
# verbatim as a tool argument.
_KEYPAD_RE = re.compile(r"^\s*keypad entry:\s*(?P<keys>[0-9*#A-D ]+)\s*$", re.IGNORECASE)


def keypad_digits(value: str) -> str | None:
    """The digits of a keypad entry passed as an argument (``"Keypad entry: 0303*1985"`` ->
    ``"03031985"``), or ``None`` when ``value`` is not one."""
    match = _KEYPAD_RE.match(value or "")
    return only_digits(match.group("keys")) if match else None


def only_digits(value: str) -> str:
    """The ASCII digits of ``value``, as a caller's spoken or typed number may contain others."""
    return "".join(ch for ch in value if ch in "0123456789")
