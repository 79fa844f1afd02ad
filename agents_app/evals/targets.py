"""Which target a run uses: ``engine`` in process, or a running service over one of its transports."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from agents_app.evals.observe import Target

__all__ = ["REMOTE", "TRANSPORTS", "make_target"]

REMOTE = {
    "browser": "BrowserTarget",
    "phone": "PhoneTarget",
    "twilio": "TwilioTarget",
    "audiohook": "AudioHookTarget",
}
TRANSPORTS = ("engine", *REMOTE)


def make_target(
    name: str, *, url: str | None = None, api_key: str | None = None, realtime: bool = False
) -> Callable[[], Target]:
    """A factory of fresh targets (one per test). ``ValueError`` for an unknown transport or a
    remote one without ``url``. ``realtime``: the test caller hears the agent's audio out as a
    person would, where the wire lets it do otherwise (the engine, the browser socket); the phone
    wires and AudioHook are paced by the service, so they always take real time."""
    if name == "engine":
        from agents_app.evals.engine_target import EngineTarget

        return lambda: EngineTarget(realtime=realtime)
    if name not in REMOTE:
        raise ValueError(f"unknown transport {name!r} (one of {', '.join(TRANSPORTS)})")
    if not url:
        raise ValueError(f"--transport {name} needs --url (the running service, e.g. http://127.0.0.1:8000)")
    module = importlib.import_module("agents_app.evals.remote_targets")  # imported only when used
    cls = getattr(module, REMOTE[name])
    if name == "browser":
        return lambda: cls(url, api_key, realtime=realtime)
    return lambda: cls(url, api_key)
