"""Realistic, deterministic demo customer profiles (the caller the banking agents verify and serve).

:func:`generate_profile` builds a Profile (the ``CONTRACTS.md`` shape plus a few extras: address,
cards, recent transactions, insurance policies) from a seed; :func:`profile_memory` turns one into
the session-memory entries that make it the session's caller.

Everything except ``created_at`` / ``expires_at`` follows from ``(seed, scenario)`` and the UTC
*date* of ``now``: recent transactions are dated relative to that day and the date of birth
relative to its year, so two profiles of one seed generated on the same day are identical apart
from the timestamps (pass ``now=`` to pin the dates too). The same seed gives the same person in
both scenarios.

Pure Python (standard library only): no Django, no database. Every value is fictional: phone
numbers use the unassigned ``555`` area code and e-mail addresses the reserved ``example.*``
domains.
"""

from __future__ import annotations

import copy
import hashlib
import random
import secrets
import time
from datetime import UTC, datetime
from typing import Any

from agents_app.profiles.banking import draw_banking
from agents_app.profiles.draws import DEFAULT_CURRENCY
from agents_app.profiles.insurance import draw_insurance
from agents_app.profiles.person import ascii_slug, draw_person

__all__ = [
    "DEFAULT_CURRENCY",
    "INSTITUTIONS",
    "PROFILE_TTL_SECONDS",
    "SCENARIOS",
    "ascii_slug",
    "generate_profile",
    "is_expired",
    "profile_id",
    "profile_memory",
]

PROFILE_TTL_SECONDS = 86400
INSTITUTIONS: dict[str, str] = {"banking": "Contoso Bank", "insurance": "Contoso Insurance"}
SCENARIOS: tuple[str, ...] = tuple(INSTITUTIONS)


def profile_id(seed: int, scenario: str) -> str:
    """The id of the profile of ``(seed, scenario)``: ``"prof_"`` + 16 hex digits."""
    return "prof_" + hashlib.sha256(f"profile:{scenario}:{seed}".encode()).hexdigest()[:16]


def _iso_utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_iso_utc(value: str) -> float:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def is_expired(profile: dict, now: float | None = None) -> bool:
    """Whether ``profile`` is past its ``expires_at`` (a malformed one counts as expired)."""
    try:
        expires = _parse_iso_utc(profile["expires_at"])
    except (KeyError, TypeError, ValueError):
        return True
    return (time.time() if now is None else now) >= expires


def generate_profile(seed: int | None = None, scenario: str = "banking", now: float | None = None) -> dict:
    """A demo customer profile (``CONTRACTS.md`` Profile shape plus extras), JSON-ready.

    ``seed`` ``None`` picks a random one (recorded in ``"seed"``). ``scenario`` is ``"banking"``
    or ``"insurance"`` (``ValueError`` otherwise). ``now`` (epoch seconds, default the current
    time) sets ``created_at``; ``expires_at`` is :data:`PROFILE_TTL_SECONDS` later.
    """
    if scenario not in INSTITUTIONS:
        raise ValueError(f"unknown profile scenario {scenario!r}; expected one of {', '.join(SCENARIOS)}")
    if seed is None:
        seed = secrets.randbelow(2**31)
    elif isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
    created = int(time.time() if now is None else now)
    today = datetime.fromtimestamp(created, UTC).date()

    person = draw_person(random.Random(seed), today)  # the same person in every scenario
    details_rng = random.Random(f"{scenario}:{seed}")
    details = (
        draw_banking(details_rng, today) if scenario == "banking" else draw_insurance(details_rng, today)
    )

    profile: dict[str, Any] = {
        "id": profile_id(seed, scenario),
        "scenario": scenario,
        "seed": seed,
        "full_name": person["full_name"],
        "first_name": person["first_name"],
        "last_name": person["last_name"],
        "email": person["email"],
        "phone_number": person["phone_number"],
        "address": person["address"],
        "institution_name": INSTITUTIONS[scenario],
        "client_id": person["client_id"],
        "accounts": details["accounts"],
        "cards": details["cards"],
        "recent_transactions": details["recent_transactions"],
    }
    if scenario == "insurance":
        profile["policies"] = details["policies"]
        profile["claims"] = details["claims"]
    profile.update(
        {
            "mfa": person["mfa"],
            "verification": person["verification"],
            "created_at": _iso_utc(created),
            "expires_at": _iso_utc(created + PROFILE_TTL_SECONDS),
        }
    )
    return profile


def profile_memory(profile: dict) -> dict:
    """The session-memory entries that make ``profile`` the session's caller.

    Besides the caller's details it resets the verification state (``authenticated``,
    ``identity_verified``, attempts, a pending one-time code, blocked cards of a previous caller),
    so a session that switches profiles starts unverified.
    """
    full_name = str(profile.get("full_name") or "")
    first_name = profile.get("first_name") or (full_name.split()[0] if full_name.split() else "")
    return {
        "caller_name": full_name,
        "caller_first_name": first_name,
        "caller_phone": profile.get("phone_number"),
        "caller_email": profile.get("email"),
        "client_id": profile.get("client_id"),
        "institution_name": profile.get("institution_name"),
        "caller_profile": copy.deepcopy(profile),
        "authenticated": False,
        "identity_verified": False,
        "verification_attempts": 0,
        "verification_locked": False,
        "_mfa_challenge": None,
        "blocked_cards": {},
    }
