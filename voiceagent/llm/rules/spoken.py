"""Spoken-language helpers of the offline rules engine: what the offline STT writes, read as data.

The caller speaks digits, dates and ordinals as words ("march third nineteen eighty five"); the
dialog files match and extract them with these functions, which are also the Jinja filters of the
templates (``digits``, ``spoken_date``, ``say_date``, ``say_amount``, ``say_digits``, ``say_chars``).
"""

from __future__ import annotations

import calendar
import re
import unicodedata
from datetime import date
from typing import Any

__all__ = [
    "KEYPAD_PREFIX",
    "keypad_entry",
    "normalize",
    "say_amount",
    "say_chars",
    "say_date",
    "say_digits",
    "spoken_date",
    "spoken_digits",
]

_DIGIT_WORDS = {
    "zero": "0", "oh": "0", "o": "0", "one": "1", "two": "2", "three": "3", "four": "4",
    "five": "5", "six": "6", "seven": "7", "eight": "8", "nine": "9",
}  # fmt: skip
_UNITS = {w: int(d) for w, d in _DIGIT_WORDS.items() if w not in ("oh", "o")}
_TEENS = {
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}  # fmt: skip
_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
    "ninety": 90,
}  # fmt: skip
_ORDINALS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
    "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13,
    "fourteenth": 14, "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18,
    "nineteenth": 19, "twentieth": 20, "thirtieth": 30,
}  # fmt: skip
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_MONTHS["sept"] = 9
_NUMERAL_ORDINAL_RE = re.compile(r"^(\d{1,2})(st|nd|rd|th)$")
# The caller turn a keypad entry becomes (voiceagent.conversation.core: "Keypad entry: 482913").
KEYPAD_PREFIX = "Keypad entry:"
_KEYPAD_RE = re.compile(r"^\s*keypad entry:\s*([0-9*#A-D]+)\s*$", re.IGNORECASE)
_FILLER = {"the", "of", "and", "on", "in", "born", "i", "was", "my", "is", "its", "date", "birth", "a"}


def normalize(text: str) -> str:
    """Lowercase ASCII words: accents folded, apostrophes dropped, other punctuation -> spaces."""
    folded = unicodedata.normalize("NFKD", text or "")
    folded = "".join(ch for ch in folded if not unicodedata.combining(ch)).casefold()
    folded = folded.replace("'", "").replace("\u2019", "").replace("\u2018", "")
    return " ".join(re.sub(r"[^a-z0-9]+", " ", folded).split())


def keypad_entry(text: Any) -> str:
    """The digits the caller typed when ``text`` is a keypad turn (``"Keypad entry: 4829*13"`` ->
    ``"482913"``: the star and A-D keys are no digits), else ``""``; a spoken "keypad entry" is none."""
    match = _KEYPAD_RE.match(str(text or ""))
    return "".join(ch for ch in match.group(1) if ch.isdigit()) if match else ""


def spoken_digits(text: Any) -> str:
    """The digits in ``text``, spoken or written: ``"my code is four 2 oh one"`` -> ``"4201"``.

    "oh"/"o" count as zero only next to another digit; "double"/"triple" repeat the next digit.
    """
    tokens = normalize(str(text or "")).split()
    out: list[str] = []

    def digit_of(token: str) -> str | None:
        if token.isdigit():
            return token
        return _DIGIT_WORDS.get(token) if token not in ("oh", "o") else None

    repeat = 1
    for i, token in enumerate(tokens):
        if token in ("double", "triple"):
            repeat = 2 if token == "double" else 3
            continue
        value = digit_of(token)
        if value is None and token in ("oh", "o"):
            prev_is_digit = i > 0 and digit_of(tokens[i - 1]) is not None
            next_is_digit = i + 1 < len(tokens) and (
                digit_of(tokens[i + 1]) is not None or tokens[i + 1] in ("oh", "o")
            )
            value = "0" if prev_is_digit or next_is_digit else None
        if value is None:
            repeat = 1
            continue
        out.append(value * repeat if len(value) == 1 else value)
        repeat = 1
    return "".join(out)


def _cardinal(tokens: list[str], i: int) -> tuple[int | None, int]:
    """A number 0-99 spoken from ``tokens[i]`` on: (value, tokens used)."""
    if i >= len(tokens):
        return None, 0
    token = tokens[i]
    if token.isdigit() and len(token) <= 2:
        return int(token), 1
    if token in _TEENS:
        return _TEENS[token], 1
    if token in _TENS:
        if i + 1 < len(tokens) and tokens[i + 1] in _UNITS and _UNITS[tokens[i + 1]] > 0:
            return _TENS[token] + _UNITS[tokens[i + 1]], 2
        return _TENS[token], 1
    if token in _UNITS:
        return _UNITS[token], 1
    return None, 0


def _ordinal(tokens: list[str], i: int) -> tuple[int | None, int]:
    token = tokens[i]
    match = _NUMERAL_ORDINAL_RE.match(token)
    if match:
        return int(match.group(1)), 1
    if token in _ORDINALS:
        return _ORDINALS[token], 1
    if (
        token in _TENS
        and i + 1 < len(tokens)
        and tokens[i + 1] in _ORDINALS
        and _ORDINALS[tokens[i + 1]] < 10
    ):
        return _TENS[token] + _ORDINALS[tokens[i + 1]], 2
    return None, 0


def _year(tokens: list[str]) -> int | None:
    """A year from the remaining words: "1985", "nineteen eighty five", "two thousand and three"."""
    for token in tokens:
        if token.isdigit() and len(token) == 4:
            return int(token)
    words = [t for t in tokens if t != "and"]
    if "thousand" in words:
        at = words.index("thousand")
        high, _ = _cardinal(words, at - 1) if at > 0 else (None, 0)
        low, _ = _cardinal(words, at + 1)
        return (high or 0) * 1000 + (low or 0) if high else None
    groups: list[int] = []
    i = 0
    while i < len(words) and len(groups) < 2:
        if words[i] in ("oh", "o") and groups:
            value, used = _cardinal(words, i + 1)
            if value is None or value > 9:
                return None
            groups.append(value)
            i += 1 + used
            continue
        if words[i] == "hundred" and groups:
            groups.append(0)
            i += 1
            continue
        value, used = _cardinal(words, i)
        if value is None:
            i += 1
            continue
        groups.append(value)
        i += used
    if len(groups) == 2 and 10 <= groups[0] <= 99:
        return groups[0] * 100 + groups[1]
    return None


def spoken_date(text: Any) -> str:
    """An ISO date (``YYYY-MM-DD``) from a spoken or written date, or ``""`` when incomplete.

    ``"march third nineteen eighty five"``, ``"the 3rd of march 1985"``, ``"1985-03-03"`` and
    ``"3/3/1985"`` (month first) all give ``"1985-03-03"``.
    """
    raw = str(text or "")
    iso = re.search(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b", raw)
    us = re.search(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b", raw)
    try:
        if iso:
            return date(int(iso.group(1)), int(iso.group(2)), int(iso.group(3))).isoformat()
        if us:
            return date(int(us.group(3)), int(us.group(1)), int(us.group(2))).isoformat()
    except ValueError:
        return ""
    tokens = normalize(raw).split()
    month_at = next((i for i, t in enumerate(tokens) if t in _MONTHS), None)
    if month_at is None:
        return ""
    month = _MONTHS[tokens[month_at]]
    used: set[int] = {month_at}
    day: int | None = None
    for i in range(len(tokens)):  # an ordinal anywhere: "the third of march", "march third"
        value, n = _ordinal(tokens, i)
        if value is not None and i not in used:
            day, used = value, used | set(range(i, i + n))
            break
    if day is None:  # a cardinal right after the month: "march 3 1985", "march three ..."
        value, n = _cardinal(tokens, month_at + 1)
        if value is not None and 1 <= value <= 31:
            day, used = value, used | set(range(month_at + 1, month_at + 1 + n))
    if day is None:
        return ""
    rest = [t for i, t in enumerate(tokens) if i not in used and t not in _FILLER - {"and"}]
    year = _year(rest)
    if year is None:
        return ""
    try:
        return date(year, month, day).isoformat()
    except ValueError:
        return ""


def say_date(value: Any) -> str:
    """``"2024-03-05"`` -> ``"March 5"`` (month and day, as a person reads a recent date)."""
    try:
        parsed = date.fromisoformat(str(value)[:10])
    except ValueError:
        return str(value or "")
    return f"{calendar.month_name[parsed.month]} {parsed.day}"


def say_amount(value: Any, currency: str = "dollars") -> str:
    """``-41.3`` -> ``"41 dollars and 30 cents"`` (the sign is dropped: say "owed" in the template)."""
    try:
        cents = round(abs(float(value)) * 100)
    except (TypeError, ValueError):
        return str(value or "")
    whole, rest = divmod(cents, 100)
    text = f"{whole:,} {currency}".replace(",", " ") if whole >= 10000 else f"{whole} {currency}"
    if whole == 1:
        text = text[: -len(currency)] + currency.rstrip("s")
    return f"{text} and {rest} cents" if rest else text


def say_digits(value: Any) -> str:
    """``"4242"`` -> ``"4 2 4 2"`` (read digit by digit)."""
    return " ".join(ch for ch in str(value or "") if ch.isdigit())


def say_chars(value: Any) -> str:
    """``"FRD-1A2B"`` -> ``"F R D 1 A 2 B"`` (read character by character)."""
    return " ".join(ch for ch in str(value or "") if ch.isalnum())
