"""The one-time code (MFA) that completes verification: sending it and checking it.

The code is simulated (nothing is sent): it is :func:`expected_mfa_code` of the session and the
profile, so a demo UI or a test can show or compute it. Memory keys written: ``_mfa_challenge``
(hash and expiry of the code, never the code; the leading underscore keeps it out of the REST
session view), ``authenticated`` (the key the agent prompts test) and ``authenticated_at``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import time
from typing import Literal

from agents_app.builtin_tools.caller import caller_profile, digest, keypad_digits, no_profile, only_digits
from voiceagent.conversation.tools import ToolContext

logger = logging.getLogger(__name__)

MAX_MFA_ATTEMPTS = 3
MAX_MFA_SENDS = 3
MFA_CODE_TTL_SECONDS = 300
DEFAULT_MFA_CODE_LENGTH = 6


def _mask_phone(phone: str) -> str:
    return "***-***-" + only_digits(phone)[-4:]


def _mask_email(email: str) -> str:
    local, _, domain = email.partition("@")
    return f"{local[:1]}***@{domain}" if domain else "***"


def expected_mfa_code(session_id: str, profile: dict) -> str:
    """The one-time code :func:`send_mfa_code` issues to ``profile`` in session ``session_id``."""
    length = _code_length(profile)
    value = int.from_bytes(hashlib.sha256(f"mfa:{session_id}:{profile.get('id', '')}".encode()).digest()[:8])
    return f"{value % 10**length:0{length}d}"


def _code_length(profile: dict) -> int:
    mfa = profile.get("mfa") if isinstance(profile.get("mfa"), dict) else {}
    length = mfa.get("code_length", DEFAULT_MFA_CODE_LENGTH)
    return length if isinstance(length, int) and 4 <= length <= 10 else DEFAULT_MFA_CODE_LENGTH


def _code_hash(session_id: str, code: str) -> str:
    return digest("mfa-code", session_id, code)


_DIGIT_WORDS = {
    "zero": "0", "oh": "0", "o": "0", "one": "1", "two": "2", "three": "3", "four": "4",
    "five": "5", "six": "6", "seven": "7", "eight": "8", "nine": "9",
}  # fmt: skip


def _code_digits(code: str) -> str:
    """Digits of a spoken or typed code: ``"4 8-1 two"`` -> ``"4812"``, ``"Keypad entry: 4812"`` ->
    ``"4812"`` (a model may pass the caller's keypad turn on verbatim)."""
    keyed = keypad_digits(code)
    if keyed is not None:
        return keyed
    out = []
    for token in re.findall(r"[a-z]+|\d", code.casefold()):
        out.append(token if token.isdigit() else _DIGIT_WORDS.get(token, ""))
    return "".join(out)


async def send_mfa_code(ctx: ToolContext, method: Literal["sms", "email"] | None = None) -> dict:
    """Send a one-time verification code to the caller's phone or e-mail on file.
    Only after verify_client_identity succeeded. The result says where the code went (masked);
    it never contains the code. Then ask the caller to read the code out or type it on the keypad,
    and call verify_mfa_code.

    Args:
        method: "sms" or "email"; defaults to the caller's preferred method.
    """
    memory = ctx.memory
    profile = caller_profile(ctx)
    if profile is None:
        return {"sent": False, **no_profile()}
    if memory.get("identity_verified") is not True:
        return {
            "sent": False,
            "error": "identity_not_verified",
            "message": "Verify the caller with verify_client_identity first.",
        }
    if memory.get("authenticated") is True:
        return {"sent": False, "already_authenticated": True, "message": "The caller is already verified."}
    mfa = profile.get("mfa") if isinstance(profile.get("mfa"), dict) else {}
    if mfa.get("enabled") is False:
        memory["authenticated"] = True
        memory["authenticated_at"] = time.time()
        return {"sent": False, "mfa_required": False, "authenticated": True}

    previous = memory.get("_mfa_challenge") if isinstance(memory.get("_mfa_challenge"), dict) else {}
    same_caller = previous.get("profile_id") == profile.get("id")
    sends = int(previous.get("sends") or 0) if same_caller else 0
    if sends >= MAX_MFA_SENDS:
        return {
            "sent": False,
            "error": "too_many_codes",
            "message": f"{MAX_MFA_SENDS} codes were already sent in this call; no more can be sent.",
        }

    chosen = method or mfa.get("method") or "sms"
    if chosen == "email":
        destination = _mask_email(str(profile.get("email") or ""))
    else:
        chosen = "sms"
        destination = _mask_phone(str(profile.get("phone_number") or ""))
    code = expected_mfa_code(ctx.session_id, profile)
    memory["_mfa_challenge"] = {
        "profile_id": profile.get("id"),
        "code_hash": _code_hash(ctx.session_id, code),
        "expires_at": time.time() + MFA_CODE_TTL_SECONDS,
        "attempts": 0,
        "invalidated": False,
        "method": chosen,
        "sends": sends + 1,
    }
    logger.info("session %s: one-time code issued by %s", ctx.session_id, chosen)
    return {
        "sent": True,
        "method": chosen,
        "destination": destination,
        "code_length": _code_length(profile),
        "expires_in_seconds": MFA_CODE_TTL_SECONDS,
    }


async def verify_mfa_code(ctx: ToolContext, code: str) -> dict:
    """Check the one-time code the caller read out or typed; on success the caller is fully verified.
    Digits spoken as words are accepted, and so is a code typed on the keypad: a caller turn
    "Keypad entry: 482913" is the caller typing 482913. After 3 wrong codes the code is invalidated and a new
    one must be sent with send_mfa_code. Codes expire after 5 minutes.

    Args:
        code: The code exactly as the caller read or typed it, for example "482913".
    """
    memory = ctx.memory
    profile = caller_profile(ctx)
    if profile is None:
        return {"verified": False, **no_profile()}
    if memory.get("authenticated") is True:
        return {"verified": True, "authenticated": True, "message": "The caller is already verified."}
    challenge = memory.get("_mfa_challenge")
    if not isinstance(challenge, dict) or challenge.get("profile_id") != profile.get("id"):
        return {
            "verified": False,
            "error": "no_code_sent",
            "message": "Send a code with send_mfa_code first.",
        }
    if challenge.get("invalidated"):
        return {
            "verified": False,
            "error": "code_invalidated",
            "attempts_remaining": 0,
            "message": "Too many wrong codes. Send a new code with send_mfa_code.",
        }
    if time.time() >= float(challenge.get("expires_at") or 0):
        challenge["invalidated"] = True
        return {
            "verified": False,
            "error": "code_expired",
            "message": "The code has expired. Send a new code with send_mfa_code.",
        }

    given = _code_digits(code or "")
    if hmac.compare_digest(_code_hash(ctx.session_id, given), str(challenge.get("code_hash", ""))):
        memory["authenticated"] = True
        memory["authenticated_at"] = time.time()
        memory["_mfa_challenge"] = None
        logger.info("session %s: caller authenticated", ctx.session_id)
        return {"verified": True, "authenticated": True}

    attempts = int(challenge.get("attempts") or 0) + 1
    challenge["attempts"] = attempts
    remaining = max(0, MAX_MFA_ATTEMPTS - attempts)
    if remaining == 0:
        challenge["invalidated"] = True
        return {
            "verified": False,
            "error": "code_invalidated",
            "attempts_remaining": 0,
            "message": "Too many wrong codes. Send a new code with send_mfa_code.",
        }
    return {
        "verified": False,
        "error": "wrong_code",
        "attempts_remaining": remaining,
        "message": "The code does not match.",
    }
