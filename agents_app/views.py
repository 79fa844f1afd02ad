"""REST: agents, scenarios, sessions, demo profiles (CONTRACTS "Agents, scenarios, sessions, profiles")."""

from __future__ import annotations

import datetime as dt
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents_app import serializers as s
from agents_app import sessions
from agents_app.catalog import (
    agent_record,
    agent_tool_names,
    builtin_tool_names,
    catalog,
    mcp_server_names,
    scenario_from_record,
    scenario_record,
    spec_from_values,
    template_variables_allowed,
)
from agents_app.definitions import parse_agent, validate_scenario
from agents_app.models import RUNTIME_FIELDS, Agent, DemoProfile
from agents_app.session_limits import check_room
from voiceagent.conversation.session import SESSION_ID_RE, SessionState, valid_session_id
from voiceagent.conversation.specs import AgentSpec, ScenarioSpec
from voiceagent.errors import ApiError
from voiceagent.transport import session_memory

SESSION_ID_SCHEMA = {"type": "string", "pattern": SESSION_ID_RE.pattern, "maxLength": 128}
SESSION_PARAM = OpenApiParameter(
    "session_id",
    {**SESSION_ID_SCHEMA, "pattern": SESSION_ID_RE.pattern.replace("{1,128}", "{0,128}")},
    description="include this session's own agents/scenarios (empty: none)",
)
SESSION_PATH = OpenApiParameter("session_id", SESSION_ID_SCHEMA, OpenApiParameter.PATH)
DEFAULT_SCENARIO = "default"


def _session_param(request: Request) -> str | None:
    value = request.query_params.get("session_id")
    if value is None or value == "":
        return None
    if not valid_session_id(value):
        raise ApiError("Invalid session_id: 1-128 characters of A-Z a-z 0-9 _ . : -", 400)
    return value


def _validated(serializer_class, data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _session_agents(state: SessionState | None) -> dict[str, AgentSpec]:
    if state is None:
        return {}
    return {
        name.lower(): spec_from_values(rec["name"], rec, source="session", session_id=state.session_id)
        for name, rec in state.agents.items()
    }


def _session_scenarios(state: SessionState | None) -> dict[str, ScenarioSpec]:
    if state is None:
        return {}
    return {name.lower(): scenario_from_record(rec) for name, rec in state.scenarios.items()}


def _ensure_session(session_id: str) -> SessionState:
    """The session's state; a session that does not exist yet is created on the default scenario."""
    state = sessions.load_state(session_id)
    if state is not None:
        return state
    scenario = catalog.scenario(DEFAULT_SCENARIO) or next(iter(catalog.scenarios.values()), None)
    if scenario is None:
        raise ApiError("No scenario is available to start a session.", 503)
    return sessions.create_session(session_id, scenario.name, scenario.start_agent)


def _problems_to_error(problems, what: str) -> ApiError:
    errors: dict[str, list[str]] = {}
    for problem in problems:
        key = problem.field.split("[")[0].split(".")[0]
        message = problem.message if key == problem.field else f"{problem.field}: {problem.message}"
        errors.setdefault(key, []).append(message)
    first = problems[0]
    return ApiError(f"Invalid {what}: {first.field}: {first.message}", 400, errors)


class AgentListView(APIView):
    @extend_schema(
        parameters=[SESSION_PARAM],
        responses=s.AgentListSerializer,
        operation_id="agents_list",
        tags=["agents"],
        summary="List built-in agents (and a session's own)",
    )
    def get(self, request):
        session_id = _session_param(request)
        catalog.ensure_current()
        agents = [agent_record(a) for a in sorted(catalog.agents.values(), key=lambda a: a.name)]
        if session_id:
            agents += [agent_record(a) for a in _session_agents(sessions.load_state(session_id)).values()]
        return Response({"agents": agents, "total": len(agents)})

    @extend_schema(
        request=s.AgentCreateSerializer,
        responses={201: s.AgentSerializer},
        tags=["agents"],
        summary="Create a session-scoped agent",
    )
    def post(self, request):
        data = _validated(s.AgentCreateSerializer, request.data)
        session_id = data.pop("session_id")
        state = _ensure_session(session_id)
        check_room(state, "agents")
        catalog.ensure_current()
        own = _session_agents(state)
        name = data["name"]
        if name.lower() in catalog.agents or name.lower() in own:
            raise ApiError(
                f"An agent named {name!r} already exists; choose another name.",
                400,
                {"name": ["already exists"]},
            )
        if not data["prompt"].strip():
            raise ApiError("Invalid agent: prompt: must not be empty", 400, {"prompt": ["must not be empty"]})
        triggers = {a.handoff_trigger for a in [*catalog.agents.values(), *own.values()] if a.handoff_trigger}
        trigger = data.get("handoff_trigger")
        if trigger and (trigger in triggers or trigger in builtin_tool_names()):
            raise ApiError(
                f"Handoff trigger {trigger!r} is already used by another agent or tool.",
                400,
                {"handoff_trigger": ["already used"]},
            )
        scenarios = [*catalog.scenarios.values(), *_session_scenarios(state).values()]
        spec, problems = parse_agent(
            data,
            file="request",
            known_tools=agent_tool_names(),
            tool_prefixes=mcp_server_names(),
            handoff_triggers=triggers,
            source="session",
            session_id=session_id,
            origin="api",
            allowed_variables=template_variables_allowed(data["name"], scenarios),
            voices_dir=settings.CONFIG.TTS_VOICES_DIR,
        )
        errors = [p for p in problems if p.is_error]
        if spec is None or errors:
            raise _problems_to_error(errors, "agent")
        record = agent_record(spec, with_prompt=True)
        state.agents[spec.name] = record
        sessions.save_state(state)
        return Response(record, status=201)


class AgentDetailView(APIView):
    def _find(self, request, name: str) -> tuple[AgentSpec, SessionState | None]:
        session_id = _session_param(request)
        spec = catalog.agent(name)
        state = sessions.load_state(session_id) if session_id else None
        if spec is None:
            spec = _session_agents(state).get(name.lower())
        if spec is None:
            raise ApiError(f"Agent {name!r} not found.", 404)
        return spec, state

    @extend_schema(
        parameters=[SESSION_PARAM],
        responses=s.AgentSerializer,
        tags=["agents"],
        summary="Agent details with its prompt template",
    )
    def get(self, request, name: str):
        spec, _ = self._find(request, name)
        return Response(agent_record(spec, with_prompt=True))

    @extend_schema(
        parameters=[SESSION_PARAM],
        request=s.RuntimeSettingsSerializer,
        responses=s.AgentSerializer,
        tags=["agents"],
        summary="Update runtime settings (applies from the next turn, persists)",
    )
    def put(self, request, name: str):
        changes = _validated(s.RuntimeSettingsSerializer, request.data)
        if not changes:
            raise ApiError(f"Nothing to update: send any of {', '.join(RUNTIME_FIELDS)}.", 400)
        spec, state = self._find(request, name)
        if spec.source == "session":
            assert state is not None
            record = state.agents[spec.name]
            record.update(changes)
            sessions.save_state(state)
            return Response(
                {
                    **agent_record(
                        spec_from_values(spec.name, record, source="session", session_id=state.session_id),
                        with_prompt=True,
                    )
                }
            )
        with transaction.atomic():
            row = Agent.objects.select_for_update().get(name__iexact=spec.name)
            for field_name, value in changes.items():
                row.set_override(field_name, "" if value is None and field_name == "greeting" else value)
            row.save()
        catalog.bump()
        return Response(agent_record(catalog.agent(spec.name), with_prompt=True))


class ScenarioListView(APIView):
    @extend_schema(
        parameters=[SESSION_PARAM],
        responses=s.ScenarioListSerializer,
        operation_id="scenarios_list",
        tags=["scenarios"],
        summary="List built-in scenarios (and a session's own)",
    )
    def get(self, request):
        session_id = _session_param(request)
        catalog.ensure_current()
        items = [scenario_record(x) for x in sorted(catalog.scenarios.values(), key=lambda x: x.name)]
        if session_id:
            items += [
                scenario_record(x) for x in _session_scenarios(sessions.load_state(session_id)).values()
            ]
        return Response({"scenarios": items, "total": len(items)})

    @extend_schema(
        request=s.ScenarioCreateSerializer,
        responses={201: s.ScenarioSerializer},
        tags=["scenarios"],
        summary="Create a session-scoped scenario",
    )
    def post(self, request):
        data = _validated(s.ScenarioCreateSerializer, request.data)
        session_id = data.pop("session_id")
        data["handoffs"] = [dict(h) for h in data.get("handoffs", [])]
        state = _ensure_session(session_id)
        check_room(state, "scenarios")
        catalog.ensure_current()
        if data["name"].lower() in catalog.scenarios or data["name"].lower() in _session_scenarios(state):
            raise ApiError(
                f"A scenario named {data['name']!r} already exists; choose another name.",
                400,
                {"name": ["already exists"]},
            )
        agents = {a.name: a for a in catalog.agents.values()}
        agents.update({a.name: a for a in _session_agents(state).values()})
        # names are matched case-insensitively, then stored in their canonical spelling
        canonical = {n.lower(): n for n in agents}
        data["agents"] = [canonical.get(a.lower(), a) for a in data["agents"]]
        data["start_agent"] = canonical.get(data["start_agent"].lower(), data["start_agent"])
        for h in data["handoffs"]:
            h["from"] = canonical.get(h["from"].lower(), h["from"])
            h["to"] = canonical.get(h["to"].lower(), h["to"])
        problems = [
            p for p in validate_scenario(data, agents, file="request", check_templates=False) if p.is_error
        ]
        if problems:
            raise _problems_to_error(problems, "scenario")
        record = {**data, "source": "session", "session_id": session_id}
        state.scenarios[data["name"]] = record
        sessions.save_state(state)
        return Response(scenario_record(scenario_from_record(record)), status=201)


class ScenarioDetailView(APIView):
    @extend_schema(
        parameters=[SESSION_PARAM],
        responses=s.ScenarioSerializer,
        tags=["scenarios"],
        summary="Scenario details: agents, handoffs, start agent",
    )
    def get(self, request, name: str):
        session_id = _session_param(request)
        spec = catalog.scenario(name)
        if spec is None and session_id:
            spec = _session_scenarios(sessions.load_state(session_id)).get(name.lower())
        if spec is None:
            raise ApiError(f"Scenario {name!r} not found.", 404)
        return Response(scenario_record(spec))


def _check_session_id(session_id: str) -> None:
    if not valid_session_id(session_id):
        raise ApiError("Invalid session id: 1-128 characters of A-Z a-z 0-9 _ . : -", 400)


class SessionDetailView(APIView):
    @extend_schema(
        parameters=[SESSION_PATH],
        responses=s.SessionSerializer,
        tags=["sessions"],
        summary="Session state and history",
    )
    def get(self, request, session_id: str):
        _check_session_id(session_id)
        body = sessions.session_body(session_id)
        if body is None:
            raise ApiError(f"Session {session_id!r} not found.", 404)
        return Response(body)


class SessionResetView(APIView):
    @extend_schema(
        request=None,
        parameters=[SESSION_PATH],
        responses={201: s.SessionResetSerializer},
        tags=["sessions"],
        summary="Start a fresh session on the same scenario",
    )
    def post(self, request, session_id: str):
        _check_session_id(session_id)
        body = reset_session(session_id)
        if body is None:
            raise ApiError(f"Session {session_id!r} not found.", 404)
        return Response(body, status=201)


def reset_session(session_id: str) -> dict[str, Any] | None:
    """New id, cleared state, same scenario at its start agent; None if the session is unknown.

    The old history stays readable; session-scoped agents and scenarios move to the new id."""
    old = sessions.load_state(session_id)
    if old is None:
        body = sessions.session_body(session_id)
        if body is None:
            return None
        old = SessionState(session_id=session_id, scenario=body["scenario"], active_agent="")
    scenario = _session_scenarios(old).get(old.scenario.lower()) or catalog.scenario(old.scenario)
    if scenario is None:
        scenario = catalog.scenario(DEFAULT_SCENARIO)
    if scenario is None:
        raise ApiError("The session's scenario no longer exists and no default is available.", 409)
    new_id = sessions.new_session_id()
    state = sessions.create_session(
        new_id, scenario.name, scenario.start_agent, old.transport, previous_session_id=session_id
    )
    if scenario.source == "session":  # the session-scoped scenario moves to the new session
        state.scenarios[scenario.name] = {**old.scenarios[scenario.name], "session_id": new_id}
        for agent_name in scenario.agents:
            if agent_name in old.agents:
                state.agents[agent_name] = {**old.agents[agent_name], "session_id": new_id}
        sessions.save_state(state)
    sessions.delete_state(session_id)
    return {
        "session_id": new_id,
        "previous_session_id": session_id,
        "scenario": scenario.name,
        "active_agent": scenario.start_agent,
    }


class ProfileGenerateView(APIView):
    @extend_schema(
        request=s.ProfileRequestSerializer,
        responses={201: s.ProfileSerializer},
        tags=["profiles"],
        summary="Generate a demo customer profile (optionally the caller of a session)",
    )
    def post(self, request):
        from agents_app.profiles import PROFILE_TTL_SECONDS, generate_profile, profile_memory

        data = _validated(s.ProfileRequestSerializer, request.data)  # no body: {}, every default
        profile = generate_profile(seed=data.get("seed"), scenario=data.get("scenario") or "banking")
        expires = timezone.now() + dt.timedelta(seconds=PROFILE_TTL_SECONDS)
        session_id = data.get("session_id")
        DemoProfile.objects.update_or_create(
            id=profile["id"],
            defaults={
                "scenario": profile.get("scenario", "banking"),
                "seed": profile.get("seed", 0),
                "full_name": profile["full_name"],
                "data": profile,
                "expires_at": expires,
                "session_id": session_id,
            },
        )
        if session_id:
            state = sessions.load_state(session_id)
            if state is None:
                scenario = catalog.scenario(profile.get("scenario", "banking")) or catalog.scenario(
                    DEFAULT_SCENARIO
                )
                if scenario is None:
                    raise ApiError("No scenario is available to start a session.", 503)
                state = sessions.create_session(session_id, scenario.name, scenario.start_agent)
            memory = profile_memory(profile)
            state.memory.update(memory)
            sessions.save_state(state)
            # a conversation already live on this session (on any worker) holds its own state
            async_to_sync(session_memory.deliver)(session_id, memory)
        return Response(profile, status=201)


class ProfileDetailView(APIView):
    @extend_schema(responses=s.ProfileSerializer, tags=["profiles"], summary="A generated profile")
    def get(self, request, profile_id: str):
        row = DemoProfile.objects.filter(id=profile_id[:64], expires_at__gt=timezone.now()).first()
        if row is None:
            raise ApiError(f"Profile {profile_id!r} not found or expired.", 404)
        return Response(row.data)
