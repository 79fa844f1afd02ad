"""Finding and loading dialog files: ``fixtures/dialog/<scenario>.yaml``, cached per process.

Parsed files are shared by every ``RulesChat`` of the process and re-read when their modification
time or size changes, so an edited file takes effect on the next round without a restart. A
scenario with no file gets a small generic dialog (hello, transfer by agent name, goodbye).
"""

from __future__ import annotations

import functools
import re
import threading
from pathlib import Path
from typing import Any

import yaml

from voiceagent.llm.rules.dialog import Dialog, DialogError
from voiceagent.llm.rules.parser import Parser

__all__ = ["DIALOG_DIR", "GENERIC", "dialog_scenarios", "generic_dialog", "load_dialog"]

DIALOG_DIR = Path(__file__).resolve().parents[3] / "fixtures" / "dialog"
GENERIC = "<generic>"

_GENERIC_DIALOG: dict[str, Any] = {
    "defaults": {
        "rules": [
            {
                "match": r"\b(goodbye|bye|hang up|thats all|nothing else)\b",
                "reply": "Thanks for calling. Goodbye.",
                "tool": {"name": "end_conversation", "args": {"reason": "caller_request"}},
            },
            {
                "match": r"\b(?:talk|speak|transfer me|put me through|connect me) to (?:the |a |an )?"
                r"(?P<target>[a-z_]+(?: agent)?)",
                "reply": "Sure, transferring you now.",
                "tool": {
                    "name": "handoff_to_agent",
                    "args": {
                        "target_agent": "{{ groups.target | replace(' agent', '') }}",
                        "reason": "caller asked for {{ groups.target }}",
                    },
                },
            },
            {
                "match": r"^(hi|hello|hey|good (morning|afternoon|evening))\b",
                "reply": "Hello! How can I help?",
            },
        ],
        "after_tool": {"end_conversation": {"reply": ""}},
        "fallback": (
            "This is the offline rules engine, and there is no dialog for this scenario yet. "
            "I can say hello, transfer you to another agent by name, or say goodbye."
        ),
        "after_tool_fallback": "All done. Is there anything else?",
    }
}


# Parsed files, shared by every RulesChat of the process: path -> ((mtime_ns, size), dialog).
_CACHE: dict[str, tuple[tuple[int, int], Dialog]] = {}
_CACHE_LOCK = threading.Lock()


@functools.cache
def generic_dialog() -> Dialog:
    """The dialog of a scenario that has no file (also the last fallback of every file)."""
    return Parser(GENERIC, _GENERIC_DIALOG).parse(GENERIC)


def load_dialog(dialog_dir: Path, scenario: str) -> Dialog:
    """The parsed dialog of ``scenario`` (cached; re-read when the file changed).

    A scenario without a file gets the generic dialog; an invalid file raises
    :class:`DialogError`.
    """
    if not scenario or not re.match(r"^[A-Za-z0-9_.-]+$", scenario) or scenario.startswith("."):
        return generic_dialog()
    path = dialog_dir / f"{scenario}.yaml"
    try:
        stat = path.stat()
    except OSError:
        return generic_dialog()
    key, stamp = str(path.resolve()), (stat.st_mtime_ns, stat.st_size)
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise DialogError(f"{path}: cannot read: {exc}") from None
    dialog = Parser(str(path), data).parse(scenario)
    with _CACHE_LOCK:
        _CACHE[key] = (stamp, dialog)
    return dialog


def dialog_scenarios(dialog_dir: Path) -> list[str]:
    """The scenarios that have a dialog file in ``dialog_dir``."""
    if not dialog_dir.is_dir():
        return []
    return sorted(p.stem for p in dialog_dir.glob("*.yaml") if not p.name.startswith("."))
