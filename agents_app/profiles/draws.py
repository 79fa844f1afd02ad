"""Seeded draws every profile section shares: money amounts, digit strings, unique numbers.

Each takes the section's own :class:`random.Random`, so a profile follows from its seed alone.
"""

from __future__ import annotations

import random

DEFAULT_CURRENCY = "USD"


def money(rng: random.Random, low: float, high: float) -> float:
    """A uniform amount in ``[low, high]`` with exactly two decimals."""
    return round(rng.randint(round(low * 100), round(high * 100)) / 100, 2)


def random_digits(rng: random.Random, n: int) -> str:
    """``n`` random decimal digits (leading zeros kept)."""
    return "".join(str(rng.randrange(10)) for _ in range(n))


def unique_last4(rng: random.Random, taken: set[str]) -> str:
    """Four digits not yet in ``taken`` (added to it), so one profile's numbers never clash."""
    while True:
        value = f"{rng.randint(1000, 9999)}"
        if value not in taken:
            taken.add(value)
            return value


def unique_ref(rng: random.Random, prefix: str, taken: set[str]) -> str:
    """``prefix`` + 8 hex digits not yet in ``taken`` (added to it)."""
    while True:
        value = f"{prefix}{rng.getrandbits(32):08X}"
        if value not in taken:
            taken.add(value)
            return value
