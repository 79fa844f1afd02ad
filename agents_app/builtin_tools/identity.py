"""Identity verification: the caller's full name plus at least one personal detail.

Memory keys written: ``identity_verified``, ``verification_attempts``, ``verification_locked``.
No result ever contains the SSN digits or the date of birth.
"""

from __future__ import annotations

import hmac
import logging
import re
import unicodedata
from datetime import date, datetime

from agents_app.builtin_tools.caller import NO_PROFILE_REASON, caller_profile, keypad_digits, only_digits
from voiceagent.conversation.tools import ToolContext

logger = logging.getLogger(__name__)

MAX_VERIFICATION_ATTEMPTS = 3


def _normalize_name(value: str) -> str:
    """Case, accent, punctuation and whitespace insensitive: ``" josé  o'connor"`` -> ``"joseoconnor"``."""
    folded = unicodedata.normalize("NFKD", value)
    folded = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return "".join(ch for ch in folded.casefold() if ch.isalnum())


_DATE_FORMATS = (
    "%Y-%m-%d", "%Y/%m/%d", "%m/%d/%Y", "%m-%d-%Y", "%B %d, %Y", "%B %d %Y", "%d %B %Y",
    "%b %d, %Y", "%b %d %Y", "%d %b %Y", "%Y%m%d", "%m%d%Y",
)  # fmt: skip
# "%m%d%Y" is a date of birth typed on the keypad (03031985); it never reads as "%Y%m%d", tried first:
# the month would be the year's first two digits, 19 or 20.
_ORDINAL_RE = re.compile(r"(\d)(st|nd|rd|th)\b", re.IGNORECASE)


def _parse_date(value: str) -> date | None:
    """A date from ISO ``YYYY-MM-DD``, a common US / spelled-out form or eight digits typed on the
    keypad (``"Keypad entry: 03031985"``, month first as said in the US); ``None`` if unreadable."""
    keyed = keypad_digits(value)
    if keyed is not None:
        value = keyed
    text = _ORDINAL_RE.sub(r"\1", " ".join(value.replace(",", ", ").split())).replace(" ,", ",")
    text = text.replace(",,", ",")
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    return None


async def verify_client_identity(
    ctx: ToolContext,
    full_name: str,
    date_of_birth: str | None = None,
    ssn_last4: str | None = None,
    client_id: str | None = None,
) -> dict:
    """Check the caller's identity: their full name plus at least one personal detail.
    Call it with the full name and at least one of date_of_birth, ssn_last4 or client_id, as the
    caller said them. Every detail given must match the bank's records. After 3 failed attempts
    the verification is locked for this call. On success, continue with send_mfa_code.

    Args:
        full_name: The caller's first and last name.
        date_of_birth: Date of birth, preferably as YYYY-MM-DD (typed on the keypad: MMDDYYYY).
        ssn_last4: The last four digits of the social security number, said or typed on the keypad
            (a caller turn "Keypad entry: 1234" is the caller typing 1234).
        client_id: The client number, like CL-12345678.
    """
    memory = ctx.memory
    profile = caller_profile(ctx)
    if profile is None:
        return {"verified": False, "reason": NO_PROFILE_REASON}
    attempts = int(memory.get("verification_attempts") or 0)
    if memory.get("verification_locked") or attempts >= MAX_VERIFICATION_ATTEMPTS:
        memory["verification_locked"] = True
        return {
            "verified": False,
            "locked": True,
            "attempts_remaining": 0,
            "reason": "too many failed attempts; identity verification is locked for this call",
        }

    factors = {
        "date_of_birth": date_of_birth,
        "ssn_last4": ssn_last4,
        "client_id": client_id,
    }
    given = {k: v.strip() for k, v in factors.items() if isinstance(v, str) and v.strip()}
    if not _normalize_name(full_name or "") or not given:
        return {
            "verified": False,
            "reason": "need the full name and at least one of date_of_birth, ssn_last4, client_id",
            "attempts_remaining": MAX_VERIFICATION_ATTEMPTS - attempts,
        }

    record = profile.get("verification") if isinstance(profile.get("verification"), dict) else {}
    checks = [_normalize_name(full_name) == _normalize_name(str(profile.get("full_name", "")))]
    if "date_of_birth" in given:
        stated, expected = (
            _parse_date(given["date_of_birth"]),
            _parse_date(str(record.get("date_of_birth", ""))),
        )
        checks.append(stated is not None and stated == expected)
    if "ssn_last4" in given:
        digits = only_digits(given["ssn_last4"])
        expected = str(record.get("ssn_last4", ""))
        checks.append(len(digits) >= 4 and hmac.compare_digest(digits[-4:], expected))
    if "client_id" in given:
        expected = only_digits(str(profile.get("client_id", "")))
        checks.append(bool(expected) and hmac.compare_digest(only_digits(given["client_id"]), expected))

    if all(checks):
        memory["identity_verified"] = True
        memory["verification_attempts"] = 0
        mfa = profile.get("mfa") if isinstance(profile.get("mfa"), dict) else {}
        logger.info("session %s: caller identity verified", ctx.session_id)
        return {
            "verified": True,
            "full_name": profile.get("full_name"),
            "client_id": profile.get("client_id"),
            "mfa_required": mfa.get("enabled", True) is not False,
            "mfa_method": mfa.get("method", "sms"),
            "next_step": "call send_mfa_code",
        }

    attempts += 1
    memory["verification_attempts"] = attempts
    memory["identity_verified"] = False
    locked = attempts >= MAX_VERIFICATION_ATTEMPTS
    if locked:
        memory["verification_locked"] = True
    logger.info("session %s: identity verification failed (attempt %d)", ctx.session_id, attempts)
    return {
        "verified": False,
        "locked": locked,
        "attempts_remaining": max(0, MAX_VERIFICATION_ATTEMPTS - attempts),
        "reason": (
            "too many failed attempts; identity verification is locked for this call"
            if locked
            else "the details do not match our records"
        ),
    }
