"""The banking side of a demo profile: accounts, cards and about a month of transactions.

Transactions are dated relative to the profile's day; card purchases carry the card they were
paid with, transfers and bills do not.
"""

from __future__ import annotations

import random
from datetime import date, timedelta
from typing import Any

from agents_app.profiles.draws import DEFAULT_CURRENCY, money, unique_last4, unique_ref

_TRANSACTION_WINDOW_DAYS = 30

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


def draw_banking(rng: random.Random, today: date) -> dict[str, Any]:
    """Accounts, cards and 10 to 15 recent transactions, newest first."""
    numbers: set[str] = set()
    accounts = [
        {
            "type": "checking",
            "number_last4": unique_last4(rng, numbers),
            "balance": money(rng, 120, 9500),
            "currency": DEFAULT_CURRENCY,
        }
    ]
    if rng.random() < 0.75:
        accounts.append(
            {
                "type": "savings",
                "number_last4": unique_last4(rng, numbers),
                "balance": money(rng, 500, 65000),
                "currency": DEFAULT_CURRENCY,
            }
        )
    if rng.random() < 0.7:
        accounts.append(
            {
                "type": "credit_card",
                "number_last4": unique_last4(rng, numbers),
                "balance": -money(rng, 25, 4800),  # negative: owed to the bank
                "currency": DEFAULT_CURRENCY,
            }
        )
    by_type = {account["type"]: account for account in accounts}

    cards = [
        {
            "last4": unique_last4(rng, numbers),
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
                "last4": unique_last4(rng, numbers),
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
                "id": unique_ref(rng, "TXN-", ids),
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
    add("checking", f"Payroll deposit - {rng.choice(_EMPLOYERS)}", money(rng, 1400, 4800), "income",
        rng.randint(2, window - 1))  # fmt: skip
    merchant, low, high = rng.choice(_UTILITIES)
    add("checking", merchant, -money(rng, low, high), "utilities", rng.randint(0, window - 1))
    merchant, price = rng.choice(_SUBSCRIPTIONS)
    add("credit_card" if "credit_card" in by_type else "checking", merchant, -price, "subscriptions",
        rng.randint(0, window - 1))  # fmt: skip
    if "savings" in by_type:
        amount = money(rng, 100, 600)
        days_ago = rng.randint(0, window - 1)
        add("checking", "Transfer to savings", -amount, "transfer", days_ago)
        add("savings", "Transfer from checking", amount, "transfer", days_ago)
    if "credit_card" in by_type:
        amount = money(rng, 50, 900)
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
        add(account_type, merchant, -money(rng, low, high), category, rng.randint(0, window - 1))
    drafts = drafts[:15]

    drafts.sort(key=lambda tx: (tx["date"], tx["id"]), reverse=True)
    return {"accounts": accounts, "cards": cards, "recent_transactions": drafts}
