"""Built-in demo tools of the banking scenario: identity verification, MFA, accounts, cards, fraud.

The tools work only on the session's memory (``ctx.memory``); the caller is the profile that
:func:`agents_app.profiles.profile_memory` put there as ``memory["caller_profile"]``. No database,
no network, deterministic results. They register into the default tool registry on import (source
``"builtin"``); :func:`register_builtin_tools` registers them into another registry.

Memory keys written: ``identity_verified``, ``verification_attempts``, ``verification_locked``,
``_mfa_challenge`` (hash and expiry of the one-time code, never the code; the leading underscore
keeps it out of the REST session view), ``authenticated`` (the key the agent prompts test),
``authenticated_at``, ``blocked_cards`` (last4 -> record), ``fraud_cases``, ``escalation``,
``conversation_ended``, ``end_reason``.

Account, card and fraud tools need ``memory["authenticated"]``; without it they return
:data:`NOT_AUTHENTICATED` as a normal result, so the model can send the caller to verification.
No result ever contains the SSN digits, the date of birth or the one-time code.

The MFA code is simulated (nothing is sent): it is :func:`expected_mfa_code` of the session and
the profile, so a demo UI or a test can show or compute it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import re
import time
import unicodedata
from collections.abc import Callable
from datetime import date, datetime
from typing import Annotated, Any, Literal

from voiceagent.conversation.tools import (
    REGISTRY,
    ToolContext,
    ToolRegistry,
    ToolSpec,
    tool_spec_from_function,
)

logger = logging.getLogger(__name__)

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "MAX_MFA_ATTEMPTS",
    "MAX_MFA_SENDS",
    "MAX_VERIFICATION_ATTEMPTS",
    "MFA_CODE_TTL_SECONDS",
    "NOT_AUTHENTICATED",
    "builtin_tool_specs",
    "expected_mfa_code",
    "register_builtin_tools",
]

MAX_VERIFICATION_ATTEMPTS = 3
MAX_MFA_ATTEMPTS = 3
MAX_MFA_SENDS = 3
MFA_CODE_TTL_SECONDS = 300
MAX_TRANSACTIONS = 20
DEFAULT_MFA_CODE_LENGTH = 6

NOT_AUTHENTICATED: dict[str, str] = {
    "error": "not_authenticated",
    "message": "The caller must be verified first (verify_client_identity, then the MFA code).",
}
NO_PROFILE_REASON = "no caller profile on this session; generate one with POST /api/v1/profiles/generate"


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------


def _profile(ctx: ToolContext) -> dict | None:
    profile = ctx.memory.get("caller_profile")
    return profile if isinstance(profile, dict) else None


def _no_profile() -> dict:
    return {"error": "no_caller_profile", "message": NO_PROFILE_REASON}


def _authenticated_profile(ctx: ToolContext) -> tuple[dict | None, dict | None]:
    """``(profile, None)`` when the caller is authenticated, else ``(None, result to return)``."""
    if ctx.memory.get("authenticated") is not True:
        return None, dict(NOT_AUTHENTICATED)
    profile = _profile(ctx)
    if profile is None:
        return None, _no_profile()
    return profile, None


def _digest(*parts: object) -> str:
    return hashlib.sha256(":".join(str(p) for p in parts).encode()).hexdigest()


def _ref(prefix: str, *parts: object) -> str:
    return prefix + _digest(*parts)[:8].upper()


def _normalize_name(value: str) -> str:
    """Case, accent, punctuation and whitespace insensitive: ``" josé  o'connor"`` -> ``"joseoconnor"``."""
    folded = unicodedata.normalize("NFKD", value)
    folded = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return "".join(ch for ch in folded.casefold() if ch.isalnum())


def _only_digits(value: str) -> str:
    return "".join(ch for ch in value if ch in "0123456789")


_DATE_FORMATS = (
    "%Y-%m-%d", "%Y/%m/%d", "%m/%d/%Y", "%m-%d-%Y", "%B %d, %Y", "%B %d %Y", "%d %B %Y",
    "%b %d, %Y", "%b %d %Y", "%d %b %Y", "%Y%m%d",
)  # fmt: skip
_ORDINAL_RE = re.compile(r"(\d)(st|nd|rd|th)\b", re.IGNORECASE)


def _parse_date(value: str) -> date | None:
    """A date from ISO ``YYYY-MM-DD`` or a common US / spelled-out form; ``None`` if unreadable."""
    text = _ORDINAL_RE.sub(r"\1", " ".join(value.replace(",", ", ").split())).replace(" ,", ",")
    text = text.replace(",,", ",")
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    return None


def _mask_phone(phone: str) -> str:
    return "***-***-" + _only_digits(phone)[-4:]


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
    return _digest("mfa-code", session_id, code)


_DIGIT_WORDS = {
    "zero": "0", "oh": "0", "o": "0", "one": "1", "two": "2", "three": "3", "four": "4",
    "five": "5", "six": "6", "seven": "7", "eight": "8", "nine": "9",
}  # fmt: skip


def _code_digits(code: str) -> str:
    """Digits of a spoken code: ``"4 8-1 two"`` -> ``"4812"``."""
    out = []
    for token in re.findall(r"[a-z]+|\d", code.casefold()):
        out.append(token if token.isdigit() else _DIGIT_WORDS.get(token, ""))
    return "".join(out)


def _public_card(card: dict, blocked: dict) -> dict:
    last4 = str(card.get("last4", ""))
    return {
        "last4": last4,
        "type": card.get("type"),
        "network": card.get("network"),
        "status": "blocked" if last4 in blocked else card.get("status", "active"),
        "account_type": card.get("account_type"),
    }


def _blocked_cards(ctx: ToolContext) -> dict:
    blocked = ctx.memory.get("blocked_cards")
    if not isinstance(blocked, dict):
        blocked = {}
        ctx.memory["blocked_cards"] = blocked
    return blocked


def _account_type_key(value: str) -> str:
    key = "_".join(value.casefold().replace("-", " ").split())
    return {"credit": "credit_card", "creditcard": "credit_card", "card": "credit_card"}.get(key, key)


# --------------------------------------------------------------------------------------------------
# Identity verification and MFA
# --------------------------------------------------------------------------------------------------


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
        date_of_birth: Date of birth, preferably as YYYY-MM-DD.
        ssn_last4: The last four digits of the social security number.
        client_id: The client number, like CL-12345678.
    """
    memory = ctx.memory
    profile = _profile(ctx)
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
        digits = _only_digits(given["ssn_last4"])
        expected = str(record.get("ssn_last4", ""))
        checks.append(len(digits) >= 4 and hmac.compare_digest(digits[-4:], expected))
    if "client_id" in given:
        expected = _only_digits(str(profile.get("client_id", "")))
        checks.append(bool(expected) and hmac.compare_digest(_only_digits(given["client_id"]), expected))

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


async def send_mfa_code(ctx: ToolContext, method: Literal["sms", "email"] | None = None) -> dict:
    """Send a one-time verification code to the caller's phone or e-mail on file.
    Only after verify_client_identity succeeded. The result says where the code went (masked);
    it never contains the code. Then ask the caller to read the code and call verify_mfa_code.

    Args:
        method: "sms" or "email"; defaults to the caller's preferred method.
    """
    memory = ctx.memory
    profile = _profile(ctx)
    if profile is None:
        return {"sent": False, **_no_profile()}
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
    """Check the one-time code the caller read out; on success the caller is fully verified.
    Digits spoken as words are accepted. After 3 wrong codes the code is invalidated and a new
    one must be sent with send_mfa_code. Codes expire after 5 minutes.

    Args:
        code: The code exactly as the caller read it, for example "482913".
    """
    memory = ctx.memory
    profile = _profile(ctx)
    if profile is None:
        return {"verified": False, **_no_profile()}
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


# --------------------------------------------------------------------------------------------------
# Accounts and cards
# --------------------------------------------------------------------------------------------------


async def get_account_summary(ctx: ToolContext) -> dict:
    """The verified caller's accounts with their balances, and their cards.
    Balances are in the account currency; a negative credit card balance is the amount owed.
    Only for a caller who passed verification.
    """
    profile, refusal = _authenticated_profile(ctx)
    if refusal is not None:
        return refusal
    assert profile is not None
    blocked = _blocked_cards(ctx)
    result: dict[str, Any] = {
        "full_name": profile.get("full_name"),
        "client_id": profile.get("client_id"),
        "institution_name": profile.get("institution_name"),
        "accounts": [
            {
                "type": account.get("type"),
                "number_last4": account.get("number_last4"),
                "balance": account.get("balance"),
                "currency": account.get("currency"),
            }
            for account in profile.get("accounts") or []
        ],
        "cards": [_public_card(card, blocked) for card in profile.get("cards") or []],
    }
    if profile.get("policies"):
        result["policies"] = [
            {
                key: policy.get(key)
                for key in ("policy_number", "type", "name", "status", "premium_monthly", "currency")
            }
            for policy in profile["policies"]
        ]
    return result


async def get_recent_transactions(
    ctx: ToolContext,
    limit: Annotated[int, "How many transactions to return, newest first (1 to 20)."] = 5,
    account_type: str | None = None,
) -> dict:
    """The verified caller's most recent transactions, newest first.
    Amounts are negative for money going out and positive for money coming in.

    Args:
        limit: How many transactions to return, newest first (1 to 20).
        account_type: Only this account: "checking", "savings" or "credit_card".
    """
    profile, refusal = _authenticated_profile(ctx)
    if refusal is not None:
        return refusal
    assert profile is not None
    limit = max(1, min(MAX_TRANSACTIONS, int(limit)))
    transactions = [tx for tx in profile.get("recent_transactions") or [] if isinstance(tx, dict)]
    if account_type is not None and account_type.strip():
        wanted = _account_type_key(account_type)
        available = sorted({str(a.get("type")) for a in profile.get("accounts") or []})
        if wanted not in available:
            return {
                "error": "unknown_account_type",
                "message": f"The caller has no {account_type} account.",
                "available_account_types": available,
            }
        transactions = [tx for tx in transactions if tx.get("account_type") == wanted]
    selected = transactions[:limit]
    return {
        "transactions": [
            {
                key: tx.get(key)
                for key in (
                    "id",
                    "date",
                    "merchant",
                    "amount",
                    "currency",
                    "category",
                    "account_type",
                    "account_last4",
                    "card_last4",
                    "status",
                )
            }
            for tx in selected
        ],
        "count": len(selected),
        "total_available": len(transactions),
    }


async def block_card(
    ctx: ToolContext,
    card_last4: str | None = None,
    reason: Literal["lost", "stolen", "fraud", "damaged", "other"] = "lost",
) -> dict:
    """Block one of the verified caller's cards straight away, for example when it is lost.
    Blocking is immediate and cannot be undone on this call; a replacement card is sent to the
    address on file. Blocking a card that is already blocked changes nothing.

    Args:
        card_last4: The last four digits of the card; may be left out when the caller has one card.
        reason: Why the card is blocked.
    """
    profile, refusal = _authenticated_profile(ctx)
    if refusal is not None:
        return refusal
    assert profile is not None
    cards = [card for card in profile.get("cards") or [] if isinstance(card, dict)]
    blocked = _blocked_cards(ctx)
    choices = [{"last4": str(c.get("last4")), "type": c.get("type")} for c in cards]
    if not cards:
        return {"blocked": False, "reason": "the caller has no cards"}
    if card_last4 is None or not card_last4.strip():
        if len(cards) > 1:
            return {
                "blocked": False,
                "reason": "the caller has several cards; ask which one",
                "cards": choices,
            }
        card = cards[0]
    else:
        digits = _only_digits(card_last4)[-4:]
        card = next((c for c in cards if str(c.get("last4")) == digits), None)
        if card is None:
            return {
                "blocked": False,
                "reason": f"no card ending in {digits or card_last4.strip()} on this caller's profile",
                "cards": choices,
            }

    last4 = str(card.get("last4"))
    if last4 in blocked:
        return {**blocked[last4], "blocked": True, "already_blocked": True}
    record = {
        "card_last4": last4,
        "card_type": card.get("type"),
        "reason": reason,
        "reference": _ref("BLK-", ctx.session_id, profile.get("id"), last4),
        "replacement_card": reason != "other",
        "blocked_at": time.time(),
    }
    blocked[last4] = record
    card["status"] = "blocked"  # the session's copy of the profile
    logger.info("session %s: card blocked (%s)", ctx.session_id, reason)
    return {**record, "blocked": True, "already_blocked": False}


async def create_fraud_case(
    ctx: ToolContext, description: str, transaction_ids: list[str] | None = None
) -> dict:
    """Open a fraud case for transactions the verified caller does not recognise.
    Give the case id from the result to the caller. Asking again with the same details returns
    the same case.

    Args:
        description: What happened, in one sentence, in the caller's words.
        transaction_ids: The ids (from get_recent_transactions) of the disputed transactions.
    """
    profile, refusal = _authenticated_profile(ctx)
    if refusal is not None:
        return refusal
    assert profile is not None
    text = " ".join((description or "").split())
    if not text:
        return {"created": False, "reason": "a description of what happened is required"}
    known = {
        str(tx.get("id")).upper(): tx
        for tx in profile.get("recent_transactions") or []
        if isinstance(tx, dict)
    }
    ids: list[str] = []
    for raw in transaction_ids or []:
        tx_id = str(raw).strip().upper()
        if tx_id and tx_id not in ids:
            ids.append(tx_id)
    unknown = [tx_id for tx_id in ids if tx_id not in known]
    if unknown:
        return {
            "created": False,
            "reason": "unknown transaction ids; use the ids from get_recent_transactions",
            "unknown_transaction_ids": unknown,
        }

    cases = ctx.memory.get("fraud_cases")
    if not isinstance(cases, list):
        cases = []
        ctx.memory["fraud_cases"] = cases
    for case in cases:
        if case.get("description") == text and case.get("transaction_ids") == ids:
            return {**_public_case(case), "created": True, "already_exists": True}

    disputed = [known[tx_id] for tx_id in ids]
    case = {
        "case_id": _ref("FRD-", ctx.session_id, profile.get("id"), len(cases) + 1),
        "status": "open",
        "description": text,
        "transaction_ids": ids,
        "disputed_amount": round(sum(abs(float(tx.get("amount") or 0)) for tx in disputed), 2),
        "currency": next((tx.get("currency") for tx in disputed), None) or "USD",
        "cards_involved": sorted({str(tx["card_last4"]) for tx in disputed if tx.get("card_last4")}),
        "created_at": time.time(),
    }
    cases.append(case)
    logger.info("session %s: fraud case opened (%d transactions)", ctx.session_id, len(ids))
    return {**_public_case(case), "created": True, "already_exists": False}


def _public_case(case: dict) -> dict:
    blocked_hint = "Block the cards involved with block_card if they are not blocked yet."
    return {
        "case_id": case.get("case_id"),
        "status": case.get("status"),
        "transaction_ids": list(case.get("transaction_ids") or []),
        "disputed_amount": case.get("disputed_amount"),
        "currency": case.get("currency"),
        "cards_involved": list(case.get("cards_involved") or []),
        "next_steps": "An investigator reviews the case within two business days. " + blocked_hint,
    }


# --------------------------------------------------------------------------------------------------
# Escalation and ending
# --------------------------------------------------------------------------------------------------


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
        return {**existing, "escalated": True, "already_escalated": True}
    seed = int(_digest("queue", ctx.session_id)[:8], 16)
    position = 1 + seed % 2 if priority == "high" else 2 + seed % 5
    escalation = {
        "reference": _ref("ESC-", ctx.session_id),
        "reason": " ".join((reason or "").split()) or "caller asked for a person",
        "priority": priority,
        "queue_position": position,
        "estimated_wait_minutes": position * (2 if priority == "high" else 3),
        "authenticated": memory.get("authenticated") is True,
        "requested_at": time.time(),
    }
    memory["escalation"] = escalation
    logger.info("session %s: escalated to a human (%s priority)", ctx.session_id, priority)
    return {**escalation, "escalated": True, "already_escalated": False}


async def end_conversation(ctx: ToolContext, reason: str = "completed") -> dict:
    """End the call after saying goodbye.

    Args:
        reason: Why the conversation ends, for example "completed" or "caller_request".
    """
    text = " ".join((reason or "").split()) or "completed"
    ctx.memory["conversation_ended"] = True
    ctx.memory["end_reason"] = text
    return {"ended": True, "reason": text}


# --------------------------------------------------------------------------------------------------
# Registration
# --------------------------------------------------------------------------------------------------

_FUNCTIONS: tuple[Callable[..., Any], ...] = (
    verify_client_identity,
    send_mfa_code,
    verify_mfa_code,
    get_account_summary,
    get_recent_transactions,
    block_card,
    create_fraud_case,
    escalate_to_human,
    end_conversation,
)
BUILTIN_TOOL_NAMES: tuple[str, ...] = tuple(fn.__name__ for fn in _FUNCTIONS)

# Schema constraints the type hints cannot express: {tool: {parameter: extra keywords}}.
_SCHEMA_EXTRAS: dict[str, dict[str, dict[str, Any]]] = {
    "verify_client_identity": {"full_name": {"minLength": 1}},
    "verify_mfa_code": {"code": {"minLength": 1}},
    "get_recent_transactions": {"limit": {"minimum": 1, "maximum": MAX_TRANSACTIONS}},
    "create_fraud_case": {"description": {"minLength": 1}, "transaction_ids": {"maxItems": 20}},
}


def _build_spec(fn: Callable[..., Any]) -> ToolSpec:
    spec = tool_spec_from_function(fn, source="builtin")
    extras = _SCHEMA_EXTRAS.get(spec.name)
    if not extras:
        return spec
    parameters = {**spec.parameters, "properties": dict(spec.parameters["properties"])}
    for pname, extra in extras.items():
        parameters["properties"][pname] = {**parameters["properties"][pname], **extra}
    return dataclasses.replace(spec, parameters=parameters)


_SPECS: tuple[ToolSpec, ...] = tuple(_build_spec(fn) for fn in _FUNCTIONS)


def builtin_tool_specs() -> list[ToolSpec]:
    """The :class:`ToolSpec` of every built-in tool (built once; treat them as read-only)."""
    return list(_SPECS)


def register_builtin_tools(registry: ToolRegistry = REGISTRY) -> list[str]:
    """Register the built-in tools into ``registry``; idempotent (no change, no version bump).

    Returns :data:`BUILTIN_TOOL_NAMES`.
    """
    for spec in _SPECS:
        if registry.get(spec.name) is not spec:
            registry.register(spec, replace=True)
    return list(BUILTIN_TOOL_NAMES)


register_builtin_tools(REGISTRY)
