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
import unicodedata
from datetime import UTC, date, datetime, timedelta
from typing import Any

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
DEFAULT_CURRENCY = "USD"
INSTITUTIONS: dict[str, str] = {"banking": "Contoso Bank", "insurance": "Contoso Insurance"}
SCENARIOS: tuple[str, ...] = tuple(INSTITUTIONS)

_MFA_CODE_LENGTH = 6
_TRANSACTION_WINDOW_DAYS = 30

_FIRST_NAMES = (
    "Aisha", "Alejandro", "Amara", "Ana", "André", "Benjamin", "Chen", "Chloé", "Daniel", "Deepa",
    "Diego", "Elena", "Emily", "Fatima", "Gabriel", "Grace", "Hana", "Hiroshi", "Isabella", "Jamal",
    "James", "José", "Kai", "Kwame", "Laura", "Liam", "Lucía", "Malik", "Maria", "Mei", "Mohammed",
    "Nadia", "Noah", "Olivia", "Priya", "Rafael", "Rosa", "Samuel", "Sofia", "Tariq", "Thomas",
    "Valentina", "Wei", "Yusuf", "Zoë",
)  # fmt: skip
_LAST_NAMES = (
    "Adeyemi", "Anderson", "Brown", "Chen", "Cohen", "Davis", "Díaz", "Fernández", "Garcia",
    "Gupta", "Hernández", "Ibrahim", "Johnson", "Kim", "Kowalski", "Lee", "Martin", "Mendoza",
    "Miller", "Müller", "Nakamura", "Nguyen", "O'Connor", "Okafor", "Patel", "Petrov", "Rahman",
    "Robinson", "Rossi", "Santos", "Schmidt", "Silva", "Singh", "Smith", "Sullivan", "Tanaka",
    "Thompson", "Walker", "Williams", "Wong", "Yamamoto",
)  # fmt: skip
_EMAIL_DOMAINS = ("example.com", "example.net", "example.org")

# (city, state, first three digits of its ZIP codes)
_CITIES = (
    ("Seattle", "WA", "981"), ("Portland", "OR", "972"), ("San Diego", "CA", "921"),
    ("Phoenix", "AZ", "850"), ("Denver", "CO", "802"), ("Austin", "TX", "787"),
    ("Minneapolis", "MN", "554"), ("Chicago", "IL", "606"), ("Columbus", "OH", "432"),
    ("Nashville", "TN", "372"), ("Atlanta", "GA", "303"), ("Miami", "FL", "331"),
    ("Raleigh", "NC", "276"), ("Boston", "MA", "021"), ("Philadelphia", "PA", "191"),
)  # fmt: skip
_STREETS = (
    "Maple", "Oak", "Cedar", "Pine", "Elm", "Lakeview", "Hillcrest", "Sunset", "Park", "Washington",
    "Lincoln", "Riverside", "Highland", "Willow", "Franklin", "Meadow",
)  # fmt: skip
_STREET_SUFFIXES = ("Street", "Avenue", "Road", "Lane", "Drive", "Court", "Boulevard", "Way")
_EMPLOYERS = (
    "Northwind Traders", "Fabrikam", "Adventure Works", "Tailspin Toys", "Wide World Importers",
    "Litware", "Proseware", "Woodgrove Health",
)  # fmt: skip

# category -> [(merchant, min amount, max amount)] for card purchases
_PURCHASES: dict[str, tuple[tuple[str, float, float], ...]] = {
    "groceries": (
        ("Whole Foods Market", 18, 220),
        ("Trader Joe's", 15, 140),
        ("Safeway", 12, 180),
        ("Kroger", 14, 160),
    ),
    "dining": (
        ("Starbucks", 4, 16),
        ("Chipotle Mexican Grill", 9, 38),
        ("Blue Door Bistro", 28, 145),
        ("Panera Bread", 8, 32),
    ),
    "fuel": (("Shell", 30, 85), ("Chevron", 28, 90)),
    "transport": (("Uber", 9, 62), ("Lyft", 8, 55)),
    "shopping": (("Amazon", 12, 260), ("Target", 15, 185), ("Best Buy", 40, 900), ("IKEA", 25, 420)),
    "pharmacy": (("CVS Pharmacy", 6, 70), ("Walgreens", 5, 65)),
    "travel": (("Delta Air Lines", 180, 650), ("Marriott Hotels", 140, 480)),
    "entertainment": (("AMC Theatres", 14, 60), ("Ticketmaster", 45, 320)),
}
_SUBSCRIPTIONS = (("Netflix", 15.49), ("Spotify", 11.99), ("Apple iCloud", 2.99), ("Hulu", 17.99))
# categories paid by transfer rather than with a card
_NON_CARD = frozenset({"income", "transfer", "payment", "utilities", "premium"})
_UTILITIES = (("City Power & Light", 60, 180), ("Comcast Xfinity", 70, 125), ("Metro Water", 30, 75))

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


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------


def ascii_slug(text: str) -> str:
    """``text`` folded to lowercase ASCII letters and digits: ``"O'Connor"`` -> ``"oconnor"``."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return "".join(ch for ch in folded.lower() if ch.isalnum())


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


def _money(rng: random.Random, low: float, high: float) -> float:
    """A uniform amount in ``[low, high]`` with exactly two decimals."""
    return round(rng.randint(round(low * 100), round(high * 100)) / 100, 2)


def _digits(rng: random.Random, n: int) -> str:
    return "".join(str(rng.randrange(10)) for _ in range(n))


def _unique_last4(rng: random.Random, taken: set[str]) -> str:
    while True:
        value = f"{rng.randint(1000, 9999)}"
        if value not in taken:
            taken.add(value)
            return value


def _unique_ref(rng: random.Random, prefix: str, taken: set[str]) -> str:
    while True:
        value = f"{prefix}{rng.getrandbits(32):08X}"
        if value not in taken:
            taken.add(value)
            return value


# --------------------------------------------------------------------------------------------------
# Person
# --------------------------------------------------------------------------------------------------


def _person(rng: random.Random, today: date) -> dict[str, Any]:
    first = rng.choice(_FIRST_NAMES)
    last = rng.choice(_LAST_NAMES)
    first_slug, last_slug = ascii_slug(first), ascii_slug(last)
    pattern = rng.randrange(4)
    if pattern == 0:
        local = f"{first_slug}.{last_slug}"
    elif pattern == 1:
        local = f"{first_slug}.{last_slug}{rng.randint(10, 99)}"
    elif pattern == 2:
        local = f"{first_slug}_{last_slug}"
    else:
        local = f"{first_slug[0]}{last_slug}"
    email = f"{local}@{rng.choice(_EMAIL_DOMAINS)}"
    phone = "+1555" + _digits(rng, 7)

    city, state, zip_prefix = rng.choice(_CITIES)
    address = {
        "street": f"{rng.randint(12, 9899)} {rng.choice(_STREETS)} {rng.choice(_STREET_SUFFIXES)}",
        "city": city,
        "state": state,
        "postal_code": f"{zip_prefix}{rng.randint(1, 99):02d}",
        "country": "US",
    }

    # Born in (this year - age - 1): the age today is `age` or `age + 1`, so 21..85.
    age = rng.randint(21, 84)
    month, day = rng.randint(1, 12), rng.randint(1, 28)
    date_of_birth = date(today.year - age - 1, month, day).isoformat()
    ssn_last4 = f"{rng.randint(1, 9999):04d}"
    client_id = "CL-" + _digits(rng, 8)
    mfa_method = rng.choice(("sms", "sms", "email"))
    return {
        "first_name": first,
        "last_name": last,
        "full_name": f"{first} {last}",
        "email": email,
        "phone_number": phone,
        "address": address,
        "client_id": client_id,
        "mfa": {"method": mfa_method, "enabled": True, "code_length": _MFA_CODE_LENGTH},
        "verification": {"ssn_last4": ssn_last4, "date_of_birth": date_of_birth},
    }


# --------------------------------------------------------------------------------------------------
# Banking
# --------------------------------------------------------------------------------------------------


def _banking(rng: random.Random, today: date) -> dict[str, Any]:
    numbers: set[str] = set()
    accounts = [
        {
            "type": "checking",
            "number_last4": _unique_last4(rng, numbers),
            "balance": _money(rng, 120, 9500),
            "currency": DEFAULT_CURRENCY,
        }
    ]
    if rng.random() < 0.75:
        accounts.append(
            {
                "type": "savings",
                "number_last4": _unique_last4(rng, numbers),
                "balance": _money(rng, 500, 65000),
                "currency": DEFAULT_CURRENCY,
            }
        )
    if rng.random() < 0.7:
        accounts.append(
            {
                "type": "credit_card",
                "number_last4": _unique_last4(rng, numbers),
                "balance": -_money(rng, 25, 4800),  # negative: owed to the bank
                "currency": DEFAULT_CURRENCY,
            }
        )
    by_type = {account["type"]: account for account in accounts}

    cards = [
        {
            "last4": _unique_last4(rng, numbers),
            "type": "debit",
            "network": "Visa",
            "status": "active",
            "account_type": "checking",
            "account_last4": by_type["checking"]["number_last4"],
        }
    ]
    if "credit_card" in by_type:
        cards.append(
            {
                "last4": _unique_last4(rng, numbers),
                "type": "credit",
                "network": rng.choice(("Visa", "Mastercard")),
                "status": "active",
                "account_type": "credit_card",
                "account_last4": by_type["credit_card"]["number_last4"],
            }
        )
    card_for = {card["account_type"]: card for card in cards}

    ids: set[str] = set()
    drafts: list[dict[str, Any]] = []

    def add(account_type: str, merchant: str, amount: float, category: str, days_ago: int) -> None:
        account = by_type[account_type]
        card = card_for.get(account_type) if amount < 0 and category not in _NON_CARD else None
        drafts.append(
            {
                "id": _unique_ref(rng, "TXN-", ids),
                "date": (today - timedelta(days=days_ago)).isoformat(),
                "merchant": merchant,
                "amount": round(amount, 2),
                "currency": DEFAULT_CURRENCY,
                "category": category,
                "account_type": account_type,
                "account_last4": account["number_last4"],
                "card_last4": card["last4"] if card else None,
                "status": "posted" if days_ago > 1 else rng.choice(("posted", "pending")),
            }
        )

    window = _TRANSACTION_WINDOW_DAYS
    add("checking", f"Payroll deposit - {rng.choice(_EMPLOYERS)}", _money(rng, 1400, 4800), "income",
        rng.randint(2, window - 1))  # fmt: skip
    merchant, low, high = rng.choice(_UTILITIES)
    add("checking", merchant, -_money(rng, low, high), "utilities", rng.randint(0, window - 1))
    merchant, price = rng.choice(_SUBSCRIPTIONS)
    add("credit_card" if "credit_card" in by_type else "checking", merchant, -price, "subscriptions",
        rng.randint(0, window - 1))  # fmt: skip
    if "savings" in by_type:
        amount = _money(rng, 100, 600)
        days_ago = rng.randint(0, window - 1)
        add("checking", "Transfer to savings", -amount, "transfer", days_ago)
        add("savings", "Transfer from checking", amount, "transfer", days_ago)
    if "credit_card" in by_type:
        amount = _money(rng, 50, 900)
        days_ago = rng.randint(0, window - 1)
        add("checking", "Credit card payment", -amount, "payment", days_ago)
        add("credit_card", "Payment received - thank you", amount, "payment", days_ago)

    target = rng.randint(10, 15)
    categories = list(_PURCHASES)
    weights = [6, 5, 2, 2, 4, 1, 1, 1]
    while len(drafts) < target:
        category = rng.choices(categories, weights=weights)[0]
        merchant, low, high = rng.choice(_PURCHASES[category])
        account_type = "credit_card" if "credit_card" in by_type and rng.random() < 0.45 else "checking"
        add(account_type, merchant, -_money(rng, low, high), category, rng.randint(0, window - 1))
    drafts = drafts[:15]

    drafts.sort(key=lambda tx: (tx["date"], tx["id"]), reverse=True)
    return {"accounts": accounts, "cards": cards, "recent_transactions": drafts}


# --------------------------------------------------------------------------------------------------
# Insurance
# --------------------------------------------------------------------------------------------------


def _anniversary(start: date, year: int) -> date:
    """``start``'s anniversary in ``year`` (February 29 falls back to the 28th)."""
    return start.replace(year=year, day=min(start.day, 28) if start.month == 2 else start.day)


def _insurance(rng: random.Random, today: date) -> dict[str, Any]:
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
            "policy_number": "POL-" + _digits(rng, 8),
            "type": kind,
            "name": f"{label} insurance",
            "status": "active",
            "premium_monthly": _money(rng, low, high),
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
    account_last4 = _unique_last4(rng, numbers)
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
                "id": _unique_ref(rng, "TXN-", ids),
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
                "claim_number": "CLM-" + _digits(rng, 8),
                "policy_number": policy["policy_number"],
                "status": rng.choice(("submitted", "under_review", "approved")),
                "filed_on": (today - timedelta(days=rng.randint(3, 60))).isoformat(),
                "amount_claimed": _money(rng, 300, 12000),
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


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------


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

    person = _person(random.Random(seed), today)  # the same person in every scenario
    details_rng = random.Random(f"{scenario}:{seed}")
    details = _banking(details_rng, today) if scenario == "banking" else _insurance(details_rng, today)

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
