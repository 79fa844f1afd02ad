"""Configuration from the environment, validated once at startup.

Every variable the service reads is declared here with its default, what it accepts and a one-line
meaning; the README table is generated from the same declarations (``python -m voiceagent.config``).
An invalid value stops startup with ONE line naming the variable and what it accepts
(:class:`ConfigError`). This module imports nothing from Django so the engine and scripts can
use it too.

The declarations live by area (:mod:`.service_vars`, :mod:`.transport_vars`,
:mod:`.provider_vars`), the machinery apart (:mod:`.parsing`, :mod:`.variables`, :mod:`.loading`);
this ``__init__`` is the public face settings and the rest import from.
"""

from __future__ import annotations

from pathlib import Path

from .loading import Config, load_config, read_dotenv
from .parsing import ConfigError, Var, parse_value
from .variables import BY_NAME, SECRET_NAMES, TUNABLE_KEYS, VARIABLES, markdown_table

BASE_DIR = Path(__file__).resolve().parent.parent.parent

__all__ = [
    "BASE_DIR",
    "BY_NAME",
    "SECRET_NAMES",
    "TUNABLE_KEYS",
    "VARIABLES",
    "Config",
    "ConfigError",
    "Var",
    "load_config",
    "markdown_table",
    "parse_value",
    "read_dotenv",
]
