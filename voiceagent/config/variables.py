"""The table of every variable, in README order, and the views derived from it (by name, the
runtime-tunable keys, the secret names, the README table itself)."""

from __future__ import annotations

from .parsing import Var
from .provider_vars import LLM, REALTIME, SPEECH
from .recording_vars import RECORDING
from .service_vars import APPCONFIG, CACHE, MCP, SERVICE
from .transport_vars import BROWSER, TELEPHONY
from .turn_taking_vars import TURN_TAKING

VARIABLES: tuple[Var, ...] = (
    *SERVICE,
    *TELEPHONY,
    *LLM,
    *SPEECH,
    *TURN_TAKING,
    *CACHE,
    *REALTIME,
    *BROWSER,
    *RECORDING,
    *MCP,
    *APPCONFIG,
)
BY_NAME: dict[str, Var] = {v.name: v for v in VARIABLES}
TUNABLE_KEYS: tuple[str, ...] = tuple(v.name for v in VARIABLES if v.tunable)
SECRET_NAMES: frozenset[str] = frozenset(v.name for v in VARIABLES if v.secret)


def markdown_table() -> str:
    """The README configuration table, generated from :data:`VARIABLES`."""
    lines = ["| Variable | Default | Meaning |", "|---|---|---|"]
    for var in VARIABLES:
        default = "—" if var.default in (None, "") else f"`{var.default}`"
        flags = " (secret)" if var.secret else ""
        flags += " (runtime-tunable)" if var.tunable else ""
        lines.append(f"| `{var.name}` | {default} | {var.help}{flags} |")
    return "\n".join(lines)
