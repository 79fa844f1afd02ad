"""The insurance side of a demo profile: policies, the premium billing account, payments, claims."""

from __future__ import annotations

import random
from datetime import date, timedelta
from typing import Any

from agents_app.profiles.draws import DEFAULT_CURRENCY, money, random_digits, unique_last4, unique_ref

_POLICY_TYPES = {
    "auto": ("Auto", 85, 240, (500, 1000), (50_000, 300_000)),
    "home": ("Homeowners", 90, 260, (1000, 2500), (250_000, 900_000)),
    "renters": ("Renters", 12, 30, (250, 500), (20_000, 60_000)),
    "life": ("Term life", 25, 120, (0, 0), (100_000, 1_000_000)),
}
_VEHICLES = (
    "2019 Toyota Camry", "2021 Honda CR-V", "2018 Ford F-150", "2022 Tesla Model 3",
    "2017 Subaru Outback", "2020 Hyundai Elantra", "2023 Kia Sportage",
)  # fmt: skip


def _anniversary(start: date, year: int) -> date:
    """``start``'s anniversary in ``year`` (February 29 falls back to the 28th)."""
    return start.replace(year=year, day=min(start.day, 28) if start.month == 2 else start.day)


def draw_insurance(rng: random.Random, today: date) -> dict[str, Any]:
    """Policies, the premium billing account, premium payments (newest first) and claims."""
    numbers: set[str] = set()
    kinds = ["auto"]
    kinds.append(rng.choice(("home", "renters")))
    if rng.random() < 0.4:
        kinds.append("life")
    rng.shuffle(kinds)
    kinds = kinds[: rng.randint(1, len(kinds))]

    policies = []
    for kind in kinds:
        label, low, high, deductibles, coverage = _POLICY_TYPES[kind]
        start = today - timedelta(days=rng.randint(30, 6 * 365))
        renewal = _anniversary(start, today.year)
        if renewal <= today:
            renewal = _anniversary(start, today.year + 1)
        policy: dict[str, Any] = {
            "policy_number": "POL-" + random_digits(rng, 8),
            "type": kind,
            "name": f"{label} insurance",
            "status": "active",
            "premium_monthly": money(rng, low, high),
            "currency": DEFAULT_CURRENCY,
            "deductible": float(rng.choice(deductibles)),
            "coverage_amount": float(rng.randrange(coverage[0], coverage[1] + 1, 5000)),
            "start_date": start.isoformat(),
            "renewal_date": renewal.isoformat(),
        }
        if kind == "auto":
            policy["vehicle"] = rng.choice(_VEHICLES)
        policies.append(policy)

    monthly = round(sum(p["premium_monthly"] for p in policies), 2)
    account_last4 = unique_last4(rng, numbers)
    overdue = rng.random() < 0.25
    accounts = [
        {
            "type": "premium_billing",
            "number_last4": account_last4,
            "balance": -monthly if overdue else 0.0,  # negative: premium due
            "currency": DEFAULT_CURRENCY,
        }
    ]

    ids: set[str] = set()
    transactions = []
    first_payment = 1 if overdue else 0
    for month in range(first_payment, first_payment + rng.randint(3, 6)):
        transactions.append(
            {
                "id": unique_ref(rng, "TXN-", ids),
                "date": (today - timedelta(days=30 * month + rng.randint(0, 3))).isoformat(),
                "merchant": "Premium payment - autopay",
                "amount": monthly,
                "currency": DEFAULT_CURRENCY,
                "category": "premium",
                "account_type": "premium_billing",
                "account_last4": account_last4,
                "card_last4": None,
                "status": "posted",
            }
        )

    claims = []
    if rng.random() < 0.35:
        policy = rng.choice(policies)
        claims.append(
            {
                "claim_number": "CLM-" + random_digits(rng, 8),
                "policy_number": policy["policy_number"],
                "status": rng.choice(("submitted", "under_review", "approved")),
                "filed_on": (today - timedelta(days=rng.randint(3, 60))).isoformat(),
                "amount_claimed": money(rng, 300, 12000),
                "currency": DEFAULT_CURRENCY,
            }
        )
    return {
        "accounts": accounts,
        "cards": [],
        "recent_transactions": transactions,
        "policies": policies,
        "claims": claims,
    }
