"""Reading the environment: :func:`load_config` parses every declared variable and runs the
checks that span several of them; :class:`Config` is the read-only result; :func:`read_dotenv`
fills the environment from a ``.env`` file first."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .parsing import ConfigError, csv_list, parse_value
from .variables import SECRET_NAMES, VARIABLES


class Config(Mapping[str, Any]):
    """Parsed, validated configuration; read-only mapping of variable name to value."""

    def __init__(self, values: dict[str, Any], raw_env: Mapping[str, str]):
        self._values = values
        self._raw_env = dict(raw_env)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(key) from None

    @property
    def production(self) -> bool:
        return self._values["ENVIRONMENT"] == "production"

    @property
    def secret_values(self) -> tuple[str, ...]:
        """Every configured secret value (for log redaction), longest first."""
        found: list[str] = []
        for name, raw in self._raw_env.items():
            if name in SECRET_NAMES or re.match(r"MCP_SERVER_\w+_(AUTH_TOKEN|HEADERS|ENV)$", name):
                if name == "API_KEYS":
                    found.extend(csv_list(raw))
                elif raw:
                    found.append(raw)
        return tuple(sorted({s for s in found if len(s) >= 6}, key=len, reverse=True))

    def raw(self, name: str, default: str | None = None) -> str | None:
        """A raw variable not in the table (for example ``MCP_SERVER_<NAME>_URL``)."""
        return self._raw_env.get(name, default)


def load_config(environ: Mapping[str, str] | None = None) -> Config:
    """Parse and validate every variable; raise :class:`ConfigError` on the first bad one."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for var in VARIABLES:
        raw = env.get(var.name)
        if raw is None or (raw.strip() == "" and var.default is None):
            values[var.name] = None if var.default is None else parse_value(var, var.default)
        else:
            values[var.name] = parse_value(var, raw)
    _cross_checks(values)
    return Config(values, env)


def _cross_checks(values: dict[str, Any]) -> None:
    if values["ENVIRONMENT"] == "production":
        key = values["SECRET_KEY"]
        if not key:
            raise ConfigError("SECRET_KEY is required when ENVIRONMENT=production: set 50+ random characters")
        if len(key) < 50 or len(set(key)) < 5:
            raise ConfigError("SECRET_KEY is too weak for ENVIRONMENT=production: use 50+ random characters")
        if "*" in values["ALLOWED_HOSTS"]:
            raise ConfigError(
                "ALLOWED_HOSTS='*' is not accepted when ENVIRONMENT=production: list the host names"
            )
        if values["TELEPHONY_ENDPOINT"] and not values["TELEPHONY_MEDIA_AUDIENCE"]:
            raise ConfigError(
                "TELEPHONY_MEDIA_AUDIENCE is required when ENVIRONMENT=production and TELEPHONY_ENDPOINT "
                "is set: set the ACS resource id, or anyone can open the media stream"
            )
    _telephony_checks(values)
    unknown = set(values["MCP_REQUIRED_SERVERS"]) - set(values["MCP_ENABLED_SERVERS"])
    if unknown:
        raise ConfigError(
            f"MCP_REQUIRED_SERVERS names {', '.join(sorted(unknown))} which is not in MCP_ENABLED_SERVERS"
        )
    if values["CLOUD_LLM_ENDPOINT"] and not values["CLOUD_LLM_DEPLOYMENT"]:
        raise ConfigError("CLOUD_LLM_DEPLOYMENT is required when CLOUD_LLM_ENDPOINT is set")
    if values["OPENAI_BASE_URL"] and not values["OPENAI_MODEL"]:
        raise ConfigError("OPENAI_MODEL is required when OPENAI_BASE_URL is set")


def _telephony_checks(values: dict[str, Any]) -> None:
    """Twilio needs its SID and token together (the token verifies every webhook); a provider named
    explicitly needs its own settings."""
    sid, token = values["TWILIO_ACCOUNT_SID"], values["TWILIO_AUTH_TOKEN"]
    if bool(sid) != bool(token):
        missing = "TWILIO_AUTH_TOKEN" if sid else "TWILIO_ACCOUNT_SID"
        raise ConfigError(f"{missing} is required when the other Twilio credential is set")
    provider = values["TELEPHONY_PROVIDER"]
    if provider == "twilio" and not sid:
        raise ConfigError("TELEPHONY_PROVIDER=twilio needs TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN")
    if provider == "acs" and not values["TELEPHONY_ENDPOINT"]:
        raise ConfigError("TELEPHONY_PROVIDER=acs needs TELEPHONY_ENDPOINT")


def read_dotenv(path: Path, environ: dict[str, str] | None = None) -> None:
    """Load ``KEY=VALUE`` lines from ``path`` into the environment without overriding it."""
    if not path.is_file():
        return
    from dotenv import dotenv_values

    env = os.environ if environ is None else environ
    for key, value in dotenv_values(path).items():
        if value is not None and key not in env:
            env[key] = value
