"""Accounts, cards and fraud cases of a verified caller.

Every tool here needs ``memory["authenticated"]``; without it it returns
:data:`~agents_app.builtin_tools.caller.NOT_AUTHENTICATED` as a normal result, so the model can
send the caller to verification. Memory keys written: ``blocked_cards`` (last4 -> record) and
``fraud_cases``.
"""

from __future__ import annotations

import logging
import time
from typing import Annotated, Any, Literal

from agents_app.builtin_tools.caller import authenticated_profile, only_digits, reference
from voiceagent.conversation.tools import ToolContext

logger = logging.getLogger(__name__)

MAX_TRANSACTIONS = 20


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


async def get_account_summary(ctx: ToolContext) -> dict:
    """The verified caller's accounts with their balances, and their cards.
    Balances are in the account currency; a negative credit card balance is the amount owed.
    Only for a caller who passed verification.
    """
    profile, refusal = authenticated_profile(ctx)
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
    profile, refusal = authenticated_profile(ctx)
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
    profile, refusal = authenticated_profile(ctx)
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
        digits = only_digits(card_last4)[-4:]
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
        "reference": reference("BLK-", ctx.session_id, profile.get("id"), last4),
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
    profile, refusal = authenticated_profile(ctx)
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
        "case_id": reference("FRD-", ctx.session_id, profile.get("id"), len(cases) + 1),
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
