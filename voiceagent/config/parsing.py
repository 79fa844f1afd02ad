"""How one environment variable is declared (:class:`Var`) and parsed: the value parsers the
declarations use, each returning the value or raising ``ValueError("accepts ...")``, and
:func:`parse_value`, which turns that into ONE :class:`ConfigError` line naming the variable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse


class ConfigError(ValueError):
    """A configuration value is invalid; the message is one line naming the variable."""


# --- parsers: each returns the parsed value or raises ValueError("accepts ...") -------------


def string(raw: str) -> str:
    return raw


def choice(*choices: str, upper: bool = False) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().upper() if upper else raw.strip().lower()
        if value not in choices:
            raise ValueError(f"accepts one of {', '.join(choices)}")
        return value

    parse.accepts = f"one of {', '.join(choices)}"  # type: ignore[attr-defined]
    return parse


def integer(lo: int, hi: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"accepts an integer from {lo} to {hi}") from None
        if not lo <= value <= hi:
            raise ValueError(f"accepts an integer from {lo} to {hi}")
        return value

    return parse


def number(lo: float, hi: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ValueError(f"accepts a number from {lo:g} to {hi:g}") from None
        if not lo <= value <= hi:
            raise ValueError(f"accepts a number from {lo:g} to {hi:g}")
        return value

    return parse


def boolean(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("accepts true or false")


def csv_list(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def url(*schemes: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip()
        parsed = urlparse(value)
        if parsed.scheme not in schemes or not parsed.netloc:
            raise ValueError(f"accepts a URL starting with {' or '.join(s + '://' for s in schemes)}")
        return value.rstrip("/")

    return parse


def database_url(raw: str) -> str:
    value = raw.strip()
    scheme = urlparse(value).scheme
    if scheme not in ("sqlite", "postgres", "postgresql"):
        raise ValueError("accepts sqlite:///<path> or postgres://user:password@host:port/name")
    return value


_RATE = re.compile(r"^[+-]?\d{1,3}(\.\d+)?%$|^(x-slow|slow|medium|fast|x-fast|default)$")


def tts_rate(raw: str) -> str:
    value = raw.strip()
    if not _RATE.match(value):
        raise ValueError("accepts a relative rate such as +3% or -10%, or x-slow/slow/medium/fast/x-fast")
    return value


def language_tag(raw: str) -> str:
    value = raw.strip()
    if not re.fullmatch(r"[a-z]{2,3}(-[A-Za-z0-9]{2,8})*", value):
        raise ValueError("accepts a BCP-47 language tag such as en-US")
    return value


def json_object(raw: str) -> dict:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        raise ValueError("accepts a JSON object") from None
    if not isinstance(value, dict):
        raise ValueError("accepts a JSON object")
    return value


@dataclass(frozen=True)
class Var:
    """One environment variable: name, default (raw string or None), parser, meaning."""

    name: str
    default: str | None
    parse: Callable[[str], Any]
    help: str
    secret: bool = False
    group: str = "service"
    tunable: bool = False  # may be overridden at runtime by the dynamic-config provider


def parse_value(var: Var, raw: str) -> Any:
    """Parse one raw value, raising :class:`ConfigError` naming the variable."""
    try:
        return var.parse(raw)
    except ValueError as exc:
        shown = "<hidden>" if var.secret else repr(raw if len(raw) <= 60 else raw[:57] + "...")
        raise ConfigError(f"{var.name}={shown} is invalid: {exc}") from None
