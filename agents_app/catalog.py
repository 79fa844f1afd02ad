"""The built-in agents and scenarios as immutable specs, shared by REST, admin and the engine.

- :func:`sync_files` (startup step 5) loads ``fixtures/`` and upserts the rows (see the file vs
  admin rule in :mod:`agents_app.models`); invalid definitions are recorded in ``problems`` and
  not served.
- :class:`Catalog` holds the specs in each process and rebuilds them from the database when the
  shared version number in the cache changes (an admin save or ``PUT /agents`` on any worker
  bumps it), so an edit reaches live conversations on every worker from their next turn.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from agents_app.definitions import (
    SESSION_VARIABLES,
    LoadResult,
    Problem,
    allowed_variables_for,
    load_definitions,
    turn_taking_spec,
    turn_taking_values,
)
from agents_app.models import Agent, Scenario, ScenarioHandoff
from voiceagent.conversation.specs import AgentSpec, HandoffMap, HandoffSpec, ScenarioSpec, VoiceSpec
from voiceagent.conversation.tools import REGISTRY, register_handoff_tools
from voiceagent.outage import OutageLog

logger = logging.getLogger("agents_app.catalog")
version_outage = OutageLog(
    logger, "session cache (catalog version)", "agents and scenarios are served as last loaded"
)
FIXTURES_ROOT = settings.BASE_DIR / "fixtures"
VERSION_KEY = "catalog:version"
CHECK_EVERY_S = 1.0


# --- conversions -----------------------------------------------------------------------------
def agent_file_values(spec: AgentSpec) -> dict[str, Any]:
    """The flat, storable field values of a spec (the CONTRACTS spelling)."""
    return {
        "description": spec.description,
        "greeting": spec.greeting,
        "return_greeting": spec.return_greeting,
        "handoff_trigger": spec.handoff_trigger,
        "tools": list(spec.tools),
        "prompt": spec.prompt_template,
        "model": spec.model,
        "temperature": spec.temperature,
        "top_p": spec.top_p,
        "max_tokens": spec.max_tokens,
        "voice": spec.voice.name,
        "voice_style": spec.voice.style,
        "voice_rate": spec.voice.rate,
        "vad_silence_timeout_ms": spec.vad_silence_timeout_ms,
        "turn_taking": turn_taking_values(spec.turn_taking),
    }


def spec_from_values(
    name: str, values: dict[str, Any], *, source: str, session_id: str | None = None, origin: str = ""
) -> AgentSpec:
    """Build an :class:`AgentSpec` from flat values (a row or a session-scoped record)."""
    return AgentSpec(
        name=name,
        prompt_template=values.get("prompt") or "",
        description=values.get("description") or "",
        greeting=values.get("greeting") or "",
        return_greeting=values.get("return_greeting") or "",
        handoff_trigger=values.get("handoff_trigger") or None,
        tools=tuple(values.get("tools") or ()),
        model=values.get("model") or None,
        temperature=values.get("temperature"),
        top_p=values.get("top_p"),
        max_tokens=values.get("max_tokens"),
        voice=VoiceSpec(
            values.get("voice") or None, values.get("voice_style") or None, values.get("voice_rate") or None
        ),
        vad_silence_timeout_ms=values.get("vad_silence_timeout_ms"),
        turn_taking=turn_taking_spec(values.get("turn_taking")),
        source=source,  # type: ignore[arg-type]
        session_id=session_id,
        origin=origin,
    )


def agent_record(spec: AgentSpec, *, with_prompt: bool = False) -> dict[str, Any]:
    """The CONTRACTS agent object."""
    record = {
        "name": spec.name,
        "description": spec.description,
        "greeting": spec.greeting,
        "handoff_trigger": spec.handoff_trigger,
        "tools": list(spec.tools),
        "model": spec.model,
        "temperature": spec.temperature,
        "top_p": spec.top_p,
        "max_tokens": spec.max_tokens,
        "voice": spec.voice.name,
        "voice_style": spec.voice.style,
        "voice_rate": spec.voice.rate,
        "return_greeting": spec.return_greeting,
        "vad_silence_timeout_ms": spec.vad_silence_timeout_ms,
        "turn_taking": turn_taking_values(spec.turn_taking),
        "source": spec.source,
        "session_id": spec.session_id,
    }
    if with_prompt:
        record["prompt"] = spec.prompt_template
    return record


def scenario_record(spec: ScenarioSpec) -> dict[str, Any]:
    """The CONTRACTS scenario object."""
    return {
        "name": spec.name,
        "description": spec.description,
        "start_agent": spec.start_agent,
        "agents": list(spec.agents),
        "handoffs": [
            {"from": h.from_agent, "to": h.to_agent, "tool": h.tool, "type": h.type} for h in spec.handoffs
        ],
        "agent_defaults": dict(spec.agent_defaults),
        "transfer_target": spec.transfer_target,
        "recording": spec.recording,
        "recording_announcement": spec.recording_announcement,
        "source": spec.source,
        "session_id": spec.session_id,
    }


def scenario_from_record(data: dict[str, Any]) -> ScenarioSpec:
    return ScenarioSpec(
        name=data["name"],
        start_agent=data["start_agent"],
        agents=tuple(data["agents"]),
        description=data.get("description", ""),
        handoffs=tuple(
            HandoffSpec(h["from"], h["to"], h["tool"], h.get("type", "announced"))
            for h in data.get("handoffs", [])
        ),
        agent_defaults=dict(data.get("agent_defaults") or {}),
        transfer_target=data.get("transfer_target") or None,
        recording=data.get("recording"),
        recording_announcement=data.get("recording_announcement") or "",
        source=data.get("source", "session"),
        session_id=data.get("session_id"),
    )


def spec_from_agent_row(row: Agent) -> AgentSpec:
    return spec_from_values(row.name, row.values(), source=row.source, origin=row.origin or "admin")


def spec_from_scenario_row(row: Scenario) -> ScenarioSpec:
    return ScenarioSpec(
        name=row.name,
        start_agent=row.start_agent,
        agents=tuple(row.agents),
        description=row.description,
        handoffs=tuple(HandoffSpec(h.from_agent, h.to_agent, h.tool, h.type) for h in row.handoffs.all()),  # type: ignore[arg-type]
        agent_defaults=dict(row.agent_defaults or {}),
        transfer_target=row.transfer_target or None,
        recording=row.recording,
        recording_announcement=row.recording_announcement,
        source=row.source,  # type: ignore[arg-type]
        origin=row.origin or "admin",
    )


def template_variables_allowed(agent_name: str, scenarios: Iterable[ScenarioSpec]) -> set[str]:
    """Variables a prompt may use: the loader's rule for an agent in scenarios; for an agent in
    none yet (being created), the session variables plus any scenario's ``agent_defaults`` key."""
    scenarios = list(scenarios)
    if any(agent_name.lower() in (a.lower() for a in s.agents) for s in scenarios):
        return allowed_variables_for(agent_name, scenarios)
    return set(SESSION_VARIABLES).union(*(s.agent_defaults.keys() for s in scenarios))


def mcp_server_names() -> set[str]:
    """MCP servers an agent may name (bare, for all their tools, or as ``<server>_<tool>`` prefix):
    the ``MCP_ENABLED_SERVERS`` and the servers added at runtime, whether connected yet or not."""
    names = set(settings.CONFIG.MCP_ENABLED_SERVERS)
    from django.db import DatabaseError

    from mcp_app.models import McpServer

    try:
        names.update(McpServer.objects.values_list("name", flat=True))
    except DatabaseError as exc:  # table missing before migrations: env servers only
        logger.debug("runtime MCP servers unknown: %s", exc)
    return names


def agent_tool_names() -> set[str]:
    """Every name an agent's ``tools`` list may hold (handoff triggers are checked separately)."""
    return builtin_tool_names() | mcp_server_names()


def builtin_tool_names() -> set[str]:
    """Registered tools that agents may list (handoff tools are derived from agents)."""
    import agents_app.builtin_tools  # noqa: F401  (registers the built-in tools)

    return {name for name in REGISTRY.names() if REGISTRY.get(name).source != "handoff"}


# --- files -> database -----------------------------------------------------------------------
def sync_files(root: Path = FIXTURES_ROOT) -> LoadResult:
    """Load the definition files and upsert them (startup step 5). Returns what was loaded."""
    servers = mcp_server_names()
    result = load_definitions(
        root, builtin_tool_names() | servers, tool_prefixes=servers, voices_dir=settings.CONFIG.TTS_VOICES_DIR
    )
    for problem in result.problems:
        log = logger.error if problem.level == "error" else logger.warning
        log("definition problem: %s", problem)
    with transaction.atomic():
        _one_writer_at_a_time()
        _sync_agents(result)
        _sync_scenarios(result)
    return result


# pg_advisory_xact_lock key ("vasy"): held until the sync's transaction ends
SYNC_LOCK = 0x76617379


def _one_writer_at_a_time() -> None:
    """Every worker of a deployment syncs the same files when it starts: without this, two workers
    on PostgreSQL both found no row for an agent and both inserted it (one failed on
    ``agent_name_ci_unique`` and served no agents). SQLite's transactions already begin
    ``IMMEDIATE`` (one writer at a time); PostgreSQL's are serialised by an advisory lock."""
    connection = transaction.get_connection()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [SYNC_LOCK])


def _problems_for(result: LoadResult, name: str, kind: str) -> list[str]:
    folder = f"/{kind}/"
    return [
        str(p)
        for p in result.problems
        if p.level == "error"
        and folder in p.file.replace("\\", "/")
        and (f"/{name}/" in p.file or p.file.endswith(f"/{name}.yaml"))
    ]


def _sync_agents(result: LoadResult) -> None:
    seen: set[str] = set()
    for spec in result.agents.values():
        seen.add(spec.name.lower())
        row = Agent.objects.filter(name__iexact=spec.name).first()
        if row is not None and row.source != "file":
            result.problems.append(
                Problem(
                    spec.origin,
                    "name",
                    f"an admin agent named {spec.name!r} exists; the file version is not loaded",
                )
            )
            continue
        row = row or Agent(name=spec.name, source="file")
        row.origin = spec.origin
        row.problems = []
        row.apply_file(agent_file_values(spec))
        row.save()
    # file agents whose file vanished or no longer validates are kept (overrides survive) but not served
    for row in Agent.objects.filter(source="file"):
        if row.name.lower() not in seen:
            row.problems = _problems_for(result, row.name, "agents") or ["definition file missing or invalid"]
            row.save(update_fields=["problems", "updated_at"])


def _sync_scenarios(result: LoadResult) -> None:
    seen: set[str] = set()
    for spec in result.scenarios.values():
        seen.add(spec.name.lower())
        row = Scenario.objects.filter(name__iexact=spec.name).first()
        if row is not None and row.source != "file":
            result.problems.append(
                Problem(
                    spec.origin,
                    "name",
                    f"an admin scenario named {spec.name!r} exists; the file version is not loaded",
                )
            )
            continue
        row = row or Scenario(name=spec.name, source="file")
        values = {
            "description": spec.description,
            "start_agent": spec.start_agent,
            "agents": list(spec.agents),
            "agent_defaults": dict(spec.agent_defaults),
            "transfer_target": spec.transfer_target or "",
            "recording": spec.recording,
            "recording_announcement": spec.recording_announcement,
        }
        row.file_values = values
        for key, value in values.items():
            setattr(row, key, row.overrides.get(key, value))
        row.origin, row.problems = spec.origin, []
        row.save()
        if "handoffs" not in row.overrides:
            row.handoffs.all().delete()
            ScenarioHandoff.objects.bulk_create(
                ScenarioHandoff(
                    scenario=row, from_agent=h.from_agent, to_agent=h.to_agent, tool=h.tool, type=h.type
                )
                for h in spec.handoffs
            )
    for row in Scenario.objects.filter(source="file"):
        if row.name.lower() not in seen:
            row.problems = _problems_for(result, row.name, "scenarios") or [
                "definition file missing or invalid"
            ]
            row.save(update_fields=["problems", "updated_at"])


# --- per-process catalog ---------------------------------------------------------------------
class Catalog:
    """Specs of the served (valid) built-in agents and scenarios, keyed by lower-case name."""

    def __init__(self) -> None:
        self.agents: dict[str, AgentSpec] = {}
        self.scenarios: dict[str, ScenarioSpec] = {}
        self.skipped: list[str] = []
        self.version: int | None = None
        self._checked_at = 0.0
        self._lock = threading.Lock()
        self.loaded = False
        self.watching = False

    def reload(self) -> None:
        """Rebuild from the database (sync: call from a thread in async code)."""
        agents, scenarios, skipped = {}, {}, []
        for row in Agent.objects.all():
            if row.problems:
                skipped.append(f"agent {row.name}: {row.problems[0]}")
            else:
                agents[row.name.lower()] = spec_from_agent_row(row)
        for row in Scenario.objects.prefetch_related("handoffs"):
            missing = [a for a in row.agents if a.lower() not in agents]
            if row.problems:
                skipped.append(f"scenario {row.name}: {row.problems[0]}")
            elif missing:
                skipped.append(f"scenario {row.name}: agent(s) not available: {', '.join(missing)}")
            else:
                scenarios[row.name.lower()] = spec_from_scenario_row(row)
        with self._lock:
            self.agents, self.scenarios, self.skipped = agents, scenarios, skipped
            self.version = cache.get(VERSION_KEY, 0)
            self.loaded = True
        register_handoff_tools(REGISTRY, {a.name: a for a in agents.values()})

    def ensure_current(self) -> None:
        """Reload when another worker (or this one) bumped the shared version; cheap to call often.

        While :meth:`watch` runs (inside the server), it does the checking in the background and
        this returns at once, so resolving an agent on the event loop does no I/O."""
        if self.watching and self.loaded:
            return
        now = time.monotonic()
        if self.loaded and now - self._checked_at < CHECK_EVERY_S:
            return
        self._checked_at = now
        if not self.loaded:
            self.reload()
            return
        try:
            version = cache.get(VERSION_KEY, 0)
        except Exception as exc:  # a cache outage: turns go on with the catalog in hand
            version_outage.failed(exc)
            return
        version_outage.ok()
        if version != self.version:
            self.reload()

    async def watch(self, interval: float = CHECK_EVERY_S) -> None:
        """Background task of the server: follow the shared version, reload when it changes."""
        from agents_app.sessions import db_call

        self.watching = True
        try:
            while True:
                await asyncio.sleep(interval)
                try:
                    version = await db_call(cache.get, VERSION_KEY, 0)
                except Exception as exc:  # a cache outage: logged once, tried again next time
                    version_outage.failed(exc)
                    continue
                version_outage.ok()
                try:
                    if version != self.version:
                        await db_call(self.reload)
                except Exception as exc:  # a database hiccup: try again next time
                    logger.warning("catalog refresh failed: %s", exc)
        finally:
            self.watching = False

    def bump(self) -> None:
        """Tell every worker that agents or scenarios changed, then reload here."""
        try:
            cache.incr(VERSION_KEY)
        except ValueError:
            cache.set(VERSION_KEY, 1, None)
        self.reload()

    def agent(self, name: str) -> AgentSpec | None:
        self.ensure_current()
        return self.agents.get(name.lower())

    def scenario(self, name: str) -> ScenarioSpec | None:
        self.ensure_current()
        return self.scenarios.get(name.lower())

    def handoff_map(self, scenario: ScenarioSpec) -> HandoffMap:
        return HandoffMap.build(scenario, {a.name: a for a in self.agents.values()})

    def snapshot(self) -> dict[str, Any]:
        return {
            "agents": sorted(a.name for a in self.agents.values()),
            "scenarios": sorted(s.name for s in self.scenarios.values()),
            "skipped": list(self.skipped),
        }


catalog = Catalog()


def spec_dict(spec: AgentSpec | ScenarioSpec) -> dict[str, Any]:
    return asdict(spec)
