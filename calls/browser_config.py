"""What a browser caller configured for its conversation (the ``config`` message), and its checks.

Apart from the socket because it is the one part of the browser wire with rules of its own
(scenarios the session made itself, typed and ranged overrides saved in the session) and because
it is what a conversation is started from (:meth:`SessionConfig.prepare`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from agents_app.sessions import db_call
from voiceagent.speech.audio import SUPPORTED_RATES
from voiceagent.speech.voices import voice_problem

OVERRIDE_FIELDS = {
    "voice": str,
    "voice_style": str,
    "voice_rate": str,
    "temperature": (int, float),
    "top_p": (int, float),
    "max_tokens": int,
    "model": str,
}
OVERRIDE_RANGES = {"temperature": (0, 2), "top_p": (0, 1), "max_tokens": (1, 16384)}
CONFIG_FIELDS = {"scenario", "agent", "sample_rate", "output_sample_rate", "overrides", "mode"}


class ClientError(ValueError):
    """A bad message: answered with an ``error`` message; the socket stays open."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def sample_rate(value: Any, field_name: str) -> int:
    """A supported PCM rate, or a ``bad_sample_rate`` error naming ``field_name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value not in SUPPORTED_RATES:
        raise ClientError(
            "bad_sample_rate", f"{field_name} must be one of {', '.join(map(str, SUPPORTED_RATES))}"
        )
    return value


def clean_overrides(value: Any) -> dict[str, Any]:
    """The agent overrides a caller may set, type- and range-checked."""
    if not isinstance(value, dict):
        raise ClientError("bad_config", "overrides must be an object")
    clean: dict[str, Any] = {}
    for key, item in value.items():
        kind = OVERRIDE_FIELDS.get(key)
        if kind is None:
            raise ClientError(
                "bad_config",
                f"overrides.{str(key)[:40]} is not overridable; allowed: {', '.join(OVERRIDE_FIELDS)}",
            )
        if item is not None and (isinstance(item, bool) or not isinstance(item, kind)):
            raise ClientError("bad_config", f"overrides.{key} has the wrong type")
        clean[key] = item
    for key, (lo, hi) in OVERRIDE_RANGES.items():
        if clean.get(key) is not None and not lo <= clean[key] <= hi:
            raise ClientError("bad_config", f"overrides.{key} must be between {lo} and {hi}")
    problem = voice_problem(clean.get("voice"), settings.CONFIG.TTS_VOICES_DIR)
    if problem:  # only voices from the allow-list reach a synthesiser
        raise ClientError("bad_config", f"overrides.voice: {problem}")
    return clean


@dataclass
class SessionConfig:
    """One socket's configuration; :meth:`apply` takes a ``config`` payload."""

    input_rate: int = 16000
    output_rate: int = 24000
    scenario: str | None = None
    agent: str | None = None
    mode: str = "cascade"
    overrides: dict[str, Any] = field(default_factory=dict)

    async def apply(self, session_id: str, payload: dict[str, Any]) -> bool:
        """Take a ``config`` payload (all checked first); True when the conversation must restart
        (another scenario or mode)."""
        unknown = set(payload) - CONFIG_FIELDS
        if unknown:
            raise ClientError("bad_config", f"unknown config field(s): {', '.join(sorted(unknown))[:200]}")
        restart = False
        if "scenario" in payload:
            scenario = payload["scenario"]
            if not isinstance(scenario, str) or not scenario:
                raise ClientError("bad_config", "scenario must be a scenario name")
            name = await db_call(scenario_name, session_id, scenario)
            if name is None:
                raise ClientError("unknown_scenario", f"scenario {scenario[:64]!r} does not exist")
            restart |= name != self.scenario
            self.scenario = name
        if "agent" in payload:
            agent = payload["agent"]
            if agent is not None and (not isinstance(agent, str) or len(agent) > 64):
                raise ClientError("bad_config", "agent must be an agent name")
            self.agent = agent
        if "sample_rate" in payload:
            self.input_rate = sample_rate(payload["sample_rate"], "sample_rate")
        if "output_sample_rate" in payload:
            self.output_rate = sample_rate(payload["output_sample_rate"], "output_sample_rate")
        if "mode" in payload:
            if payload["mode"] not in ("cascade", "live"):
                raise ClientError("bad_config", "mode must be cascade or live")
            restart |= payload["mode"] != self.mode
            self.mode = payload["mode"]
        if "overrides" in payload:
            self.overrides = clean_overrides(payload["overrides"])
            await db_call(store_overrides, session_id, self.overrides)
        return restart

    async def prepare(self, session_id: str) -> str:
        """The session to converse in, created if new, with the overrides saved; its scenario."""
        scenario = await db_call(prepare_session, session_id, self.scenario, self.overrides)
        if scenario is None:
            raise ClientError("unknown_scenario", "no scenario to start: send config {scenario} first")
        self.scenario = scenario
        return scenario


def scenario_name(session_id: str, name: str) -> str | None:
    """The name of a built-in scenario, or of one this session made (``POST /scenarios``): the
    conversation resolves both, so the socket must let the caller pick either."""
    from agents_app import sessions
    from agents_app.catalog import catalog

    spec = catalog.scenario(name)
    if spec is not None:
        return spec.name
    state = sessions.load_state(session_id)
    own = {n.lower(): n for n in (state.scenarios if state is not None else {})}
    return own.get(name.lower())


def store_overrides(session_id: str, overrides: dict[str, Any]) -> None:
    from agents_app import sessions

    state = sessions.load_state(session_id)
    if state is not None:
        state.memory["_agent_overrides"] = dict(overrides)
        sessions.save_state(state)


def prepare_session(session_id: str, scenario: str | None, overrides: dict[str, Any]) -> str | None:
    """Blocking (the cache, maybe the database): the scenario to start, None when there is none."""
    from agents_app import sessions
    from agents_app.catalog import catalog

    state = sessions.load_state(session_id)
    scenario = scenario or (state.scenario if state else None) or "default"
    spec = catalog.scenario(scenario)
    if spec is None and not (state and scenario in state.scenarios):
        return None
    if state is None:
        state = sessions.create_session(session_id, spec.name, spec.start_agent, transport="browser")
    if overrides:
        state.memory["_agent_overrides"] = dict(overrides)
        sessions.save_state(state)
    return scenario
