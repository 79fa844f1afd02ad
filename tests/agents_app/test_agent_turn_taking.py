"""An agent's ``turn_taking`` section from files, the admin and the REST API to ``AgentSpec``, and
from there to the settings a conversation works with (``ConversationCore.turn_taking_for``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents_app.definitions import load_definitions, parse_agent, validate_agent_fields
from agents_app.definitions import turn_taking_schema as tt
from agents_app.models import Agent
from voiceagent.config import turn_taking_vars
from voiceagent.conversation.core import ConversationCore
from voiceagent.conversation.specs import AgentSpec
from voiceagent.conversation.turn_taking import DEFAULT_REPROMPT, TurnTaking, TurnTakingSpec

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
TOOLS = frozenset({"end_conversation", "verify_client_identity", "send_mfa_code", "verify_mfa_code"})
TOOLS |= {"get_account_summary", "get_recent_transactions", "block_card", "create_fraud_case"}
TOOLS |= {"escalate_to_human", "attach_demo_caller"}

SECTION = {
    "min_interruption_ms": 450,
    "endpointing_max_ms": 2200,
    "filler_after_ms": 800,
    "fillers": ["  One moment while I look that up.  ", "Still checking."],
    "reprompt_after_s": 12.5,
    "max_reprompts": 3,
    "reprompt": "Hello? Are you still there?",
    "goodbye": "Goodbye for now.",
    "max_conversation_s": 900,
    "time_limit_line": "That's all the time we have.",
}
EXPECTED = TurnTakingSpec(
    min_interruption_ms=450,
    endpointing_max_ms=2200,
    filler_after_ms=800,
    fillers=("One moment while I look that up.", "Still checking."),
    reprompt_after_s=12.5,
    max_reprompts=3,
    reprompt="Hello? Are you still there?",
    goodbye="Goodbye for now.",
    max_conversation_s=900.0,
    time_limit_line="That's all the time we have.",
)


def write_root(root: Path, section: object, defaults: object = None) -> Path:
    """A definitions folder with one agent ``tt_agent`` carrying ``section`` (YAML from JSON)."""
    folder = root / "agents" / "tt_agent"
    folder.mkdir(parents=True)
    (root / "scenarios").mkdir()
    agent = {"name": "tt_agent", "prompts": {"path": "prompt.jinja"}, "tools": ["end_conversation"]}
    if section is not None:
        agent["turn_taking"] = section
    (folder / "agent.yaml").write_text(json.dumps(agent))  # JSON is YAML
    (folder / "prompt.jinja").write_text("You help.")
    if defaults is not None:
        (root / "agents" / "_defaults.yaml").write_text(json.dumps(defaults))
    return root


def core_with_globals() -> ConversationCore:
    """A cascade conversation configured as the runtime configures it (globals read from the
    service's configuration); no provider is needed to ask it for an agent's settings."""
    from voiceagent.conversation.engine import Conversation
    from voiceagent.runtime import Runtime

    return Conversation(
        "tt-1",
        stt=None,  # type: ignore[arg-type]
        tts=None,  # type: ignore[arg-type]
        chat=None,  # type: ignore[arg-type]
        vad=None,  # type: ignore[arg-type]
        config=Runtime().engine_config(),
        scenario="banking",
        directory=None,  # type: ignore[arg-type]
        store=None,  # type: ignore[arg-type]
    )


# --- files ------------------------------------------------------------------------------------------
def test_file_section_becomes_the_spec(tmp_path):
    result = load_definitions(write_root(tmp_path, SECTION), TOOLS)
    assert not result.problems, result.problems
    assert result.agents["tt_agent"].turn_taking == EXPECTED


def test_no_section_is_all_globals(tmp_path):
    result = load_definitions(write_root(tmp_path, None), TOOLS)
    assert result.agents["tt_agent"].turn_taking == TurnTakingSpec()


def test_defaults_file_merges_under_the_agents_section(tmp_path):
    defaults = {"turn_taking": {"reprompt_after_s": 30, "fillers": ["Default filler."]}}
    result = load_definitions(write_root(tmp_path, {"fillers": ["Mine."]}, defaults), TOOLS)
    assert not result.errors, result.errors
    spec = result.agents["tt_agent"].turn_taking
    assert spec.reprompt_after_s == 30.0 and spec.fillers == ("Mine.",)


def test_shipped_agents_have_their_lines():
    result = load_definitions(FIXTURES, TOOLS | {"handoff_to_agent"})
    assert not result.errors, result.errors
    auth = result.agents["auth_agent"].turn_taking
    assert auth.reprompt and "code" in auth.reprompt and auth.reprompt != DEFAULT_REPROMPT
    for name in ("concierge", "auth_agent", "cards_agent", "fraud_agent"):
        fillers = result.agents[name].turn_taking.fillers
        assert fillers and all(0 < len(line) <= tt.MAX_FILLER_CHARS for line in fillers), name


BAD = [
    ({"min_interruption_ms": 6000}, "turn_taking.min_interruption_ms", "between 0 and 5000"),
    ({"min_interruption_ms": "300"}, "turn_taking.min_interruption_ms", "must be an integer"),
    ({"min_interruption_ms": True}, "turn_taking.min_interruption_ms", "must be an integer"),
    ({"endpointing_max_ms": 50}, "turn_taking.endpointing_max_ms", "between 100 and 10000"),
    ({"filler_after_ms": 1.5}, "turn_taking.filler_after_ms", "must be an integer"),
    ({"reprompt_after_s": -1}, "turn_taking.reprompt_after_s", "between 0 and 3600"),
    ({"max_reprompts": 21}, "turn_taking.max_reprompts", "between 0 and 20"),
    ({"max_conversation_s": 86401}, "turn_taking.max_conversation_s", "between 0 and 86400"),
    ({"fillers": "One moment."}, "turn_taking.fillers", "must be a list"),
    ({"fillers": []}, "turn_taking.fillers", "1 to 10 lines"),
    ({"fillers": ["x"] * 11}, "turn_taking.fillers", "at most 10 lines"),
    ({"fillers": ["ok", "  "]}, "turn_taking.fillers[1]", "must not be empty"),
    ({"fillers": ["ok", 7]}, "turn_taking.fillers[1]", "must be a string"),
    ({"fillers": ["x" * 201]}, "turn_taking.fillers[0]", "at most 200 characters"),
    ({"reprompt": ""}, "turn_taking.reprompt", "must not be empty"),
    ({"goodbye": ["Bye"]}, "turn_taking.goodbye", "must be a string"),
    ({"time_limit_line": "y" * 501}, "turn_taking.time_limit_line", "at most 500 characters"),
    ({"fillerz": ["a"]}, "turn_taking.fillerz", "did you mean 'fillers'"),
    ({"echo_gate_db": 5}, "turn_taking.echo_gate_db", "unknown field"),
    (["fillers"], "turn_taking", "must be a mapping"),
    ("fast", "turn_taking", "must be a mapping"),
]


@pytest.mark.parametrize(("section", "field", "message"), BAD)
def test_file_problem_names_the_field(tmp_path, section, field, message):
    result = load_definitions(write_root(tmp_path, section), TOOLS)
    assert "tt_agent" not in result.agents
    found = [p for p in result.errors if p.field == field]
    assert found and message in found[0].message, result.problems


@pytest.mark.parametrize(("section", "field", "message"), BAD[:6])
def test_flat_spelling_obeys_the_same_rules(section, field, message):
    problems = validate_agent_fields(
        {"name": "x", "prompt": "Hi.", "turn_taking": section}, known_tools=TOOLS
    )
    assert any(p.field == field and message in p.message for p in problems), problems


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_file_refuses_nan_and_infinity(tmp_path, value):
    root = write_root(tmp_path, None)
    path = root / "agents" / "tt_agent" / "agent.yaml"
    path.write_text(
        "name: tt_agent\nprompts:\n  path: prompt.jinja\ntools: [end_conversation]\n"
        f"turn_taking:\n  max_conversation_s: {value}\n"
    )
    result = load_definitions(root, TOOLS)
    assert [(p.field, "between 0 and 86400" in p.message) for p in result.errors] == [
        ("turn_taking.max_conversation_s", True)
    ]


def test_ranges_are_the_configuration_variables():
    """An agent can set nothing MIN_INTERRUPTION_MS & co. would refuse, and everything they take."""
    by_name = {var.name: var for var in turn_taking_vars.TURN_TAKING}
    ranges = {**tt.INTEGER_RANGES, **tt.NUMBER_RANGES}
    for key, (low, high) in ranges.items():
        var = by_name[key.upper()]
        var.parse(str(low)), var.parse(str(high))
        for outside in (low - 1, high + 1):
            with pytest.raises(ValueError):
                var.parse(str(outside))
    assert set(ranges) | set(tt.LINE_FIELDS) | {"fillers"} == set(tt.TURN_TAKING_KEYS)


# --- into the conversation -------------------------------------------------------------------------
def test_file_spec_reaches_turn_taking_for_merged_with_globals(tmp_path):
    spec = load_definitions(write_root(tmp_path, {"reprompt": "Still there?", "max_reprompts": 4}), TOOLS)
    settings = core_with_globals().turn_taking_for(spec.agents["tt_agent"])
    assert settings.reprompt == "Still there?" and settings.max_reprompts == 4  # the agent's
    assert settings.min_interruption_ms == 300 and settings.max_conversation_s == 3600.0  # the globals'
    assert settings.endpointing_min_ms == 500


def test_spec_from_stored_values_reaches_turn_taking_for():
    """Admin rows and session records build specs through ``spec_from_values``."""
    from agents_app.catalog import spec_from_values

    spec = spec_from_values("x", {"prompt": "Hi.", "turn_taking": {"filler_after_ms": 0}}, source="admin")
    settings = core_with_globals().turn_taking_for(spec)
    assert settings.filler_after_ms == 0 and settings.reprompt_after_s == 15.0
    plain = core_with_globals().turn_taking_for(AgentSpec(name="y", prompt_template="Hi."))
    assert plain.filler_after_ms == TurnTaking().filler_after_ms  # the global default


# --- admin ------------------------------------------------------------------------------------------
@pytest.fixture
def admin_client(client, django_user_model, loaded):
    user = django_user_model.objects.create_superuser("tt-ops", "ops@example.com", "pw-123456-xyz")
    client.force_login(user)
    return client


def admin_form(section: dict | None = None, **extra) -> dict:
    """The admin's agent form; ``section``: the turn-taking keys typed into their own fields."""
    data = {"name": "tt_admin", "description": "", "greeting": "", "return_greeting": ""}
    data.update(handoff_trigger="", tools=["end_conversation"], prompt="You help.", model="")
    data.update(temperature="", top_p="", max_tokens="", voice="", voice_style="", voice_rate="")
    data.update(vad_silence_timeout_ms="")
    for key, value in (section or {}).items():
        data[f"turn_taking_{key}"] = "\n".join(value) if key == "fillers" else value
    data.update(extra)
    return data


def test_admin_agent_round_trip(admin_client):
    from agents_app.catalog import catalog

    page = admin_client.get("/admin/agents_app/agent/add/").content.decode()
    assert "Turn-taking" in page and 'name="turn_taking"' not in page  # typed fields, no JSON box
    for key in tt.TURN_TAKING_KEYS:
        assert f'name="turn_taking_{key}"' in page
    assert 'name="turn_taking_min_interruption_ms" min="0" max="5000"' in page.replace(' step="1"', "")
    response = admin_client.post("/admin/agents_app/agent/add/", admin_form(SECTION))
    assert response.status_code == 302, response.content.decode()[-3000:]
    catalog.reload()
    assert catalog.agent("tt_admin").turn_taking == EXPECTED
    row = Agent.objects.get(name="tt_admin")
    page = admin_client.get(f"/admin/agents_app/agent/{row.pk}/change/").content.decode()
    assert "One moment while I look that up." in page
    assert core_with_globals().turn_taking_for(catalog.agent("tt_admin")).max_reprompts == 3


def test_admin_empty_fields_are_an_empty_section(admin_client):
    assert admin_client.post("/admin/agents_app/agent/add/", admin_form()).status_code == 302
    assert Agent.objects.get(name="tt_admin").turn_taking == {}


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        (
            {"turn_taking_min_interruption_ms": "99999"},
            "turn_taking_min_interruption_ms",
            "less than or equal to 5000",
        ),
        ({"turn_taking_endpointing_max_ms": "abc"}, "turn_taking_endpointing_max_ms", "Enter a whole number"),
        ({"turn_taking_fillers": "\n".join(["x"] * 11)}, "turn_taking_fillers", "at most 10 lines"),
        ({"turn_taking_fillers": "x" * 201}, "turn_taking_fillers", "at most 200 characters"),
        ({"turn_taking_reprompt": "x" * 501}, "turn_taking_reprompt", "at most 500 characters"),
    ],
)
def test_admin_refuses_bad_values_on_their_field(admin_client, fields, field, message):
    response = admin_client.post("/admin/agents_app/agent/add/", admin_form(**fields))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert field in errors and message in " ".join(errors[field]), errors
    assert not Agent.objects.filter(name="tt_admin").exists()


def test_admin_edit_of_a_file_agent_is_an_override_that_survives_a_restart(admin_client):
    from agents_app.admin_forms import turn_taking_initial
    from agents_app.catalog import catalog, sync_files
    from agents_app.models import AGENT_FIELDS

    row = Agent.objects.get(name="cards_agent")
    data = {
        f: "" if v is None else v
        for f, v in ((f, getattr(row, f)) for f in AGENT_FIELDS)
        if f != "turn_taking"
    }
    data.update(turn_taking_initial(row.turn_taking))
    data.update(name="cards_agent", turn_taking_reprompt_after_s="40")
    response = admin_client.post(f"/admin/agents_app/agent/{row.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[-3000:]
    sync_files()
    catalog.reload()
    row.refresh_from_db()
    assert set(row.overrides) == {"turn_taking"}
    assert catalog.agent("cards_agent").turn_taking.reprompt_after_s == 40.0


# --- REST -------------------------------------------------------------------------------------------
def session_agent(**extra) -> dict:
    body = {"session_id": "tt-sess", "name": "tt_rest", "prompt": "You help.", "tools": ["end_conversation"]}
    return {**body, **extra}


def test_rest_round_trip_session_agent(api_client, loaded):
    response = api_client.post("/api/v1/agents", session_agent(turn_taking=SECTION), format="json")
    assert response.status_code == 201, response.json()
    expected = {**SECTION, "fillers": list(EXPECTED.fillers), "reprompt_after_s": 12.5}
    assert response.json()["turn_taking"] == expected
    body = api_client.get("/api/v1/agents/tt_rest?session_id=tt-sess").json()
    assert body["turn_taking"] == expected
    response = api_client.put(
        "/api/v1/agents/tt_rest?session_id=tt-sess", {"turn_taking": {"max_reprompts": 0}}, format="json"
    )
    assert response.status_code == 200 and response.json()["turn_taking"] == {"max_reprompts": 0}

    from agents_app import sessions
    from agents_app.views import _session_agents

    spec = _session_agents(sessions.load_state("tt-sess"))["tt_rest"]
    settings = core_with_globals().turn_taking_for(spec)
    assert settings.max_reprompts == 0 and settings.reprompt == DEFAULT_REPROMPT


def test_rest_put_on_a_file_agent_persists(api_client, loaded):
    from agents_app.catalog import catalog, sync_files

    listed = {a["name"]: a for a in api_client.get("/api/v1/agents").json()["agents"]}
    assert listed["auth_agent"]["turn_taking"]["reprompt"]
    assert listed["assistant"]["turn_taking"] == {}
    response = api_client.put(
        "/api/v1/agents/assistant", {"turn_taking": {"fillers": ["Hang on."]}}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["turn_taking"] == {"fillers": ["Hang on."]}
    sync_files()
    catalog.reload()
    assert catalog.agent("assistant").turn_taking.fillers == ("Hang on.",)
    response = api_client.put("/api/v1/agents/assistant", {"turn_taking": {}}, format="json")
    assert response.json()["turn_taking"] == {}


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"min_interruption_ms": -5}, "min_interruption_ms"),
        ({"fillers": ["ok", ""]}, "fillers[1]"),
        ({"fillers": ["x"] * 5000}, "fillers"),
        ({"goodbye": "z" * 100_000}, "goodbye"),
        ({"reprompt_after_s": 10**400}, "reprompt_after_s"),
        ({"surprise": {"deep": [[[[1]]]]}}, "surprise"),
    ],
)
@pytest.mark.parametrize("method", ["post", "put"])
def test_rest_refuses_bad_values_with_400(api_client, loaded, section, key, method):
    if method == "post":
        response = api_client.post("/api/v1/agents", session_agent(turn_taking=section), format="json")
    else:
        response = api_client.put("/api/v1/agents/concierge", {"turn_taking": section}, format="json")
    assert response.status_code == 400, response.content[:500]
    body = response.json()
    assert body["detail"].startswith("Invalid request: turn_taking: ") and key in body["detail"], body
    assert key in body["errors"]["turn_taking"]


@pytest.mark.parametrize("section", [None, [], "fast", 5, ["fillers"]])
def test_rest_refuses_a_section_that_is_no_mapping(api_client, loaded, section):
    response = api_client.put("/api/v1/agents/concierge", {"turn_taking": section}, format="json")
    assert response.status_code == 400 and "turn_taking" in response.json()["detail"]


def test_rest_refuses_a_malformed_body(api_client, loaded):
    deep = '{"turn_taking": ' + "[" * 100_000 + "]" * 100_000 + "}"
    response = api_client.put("/api/v1/agents/concierge", deep, content_type="application/json")
    assert 400 <= response.status_code < 500


def test_schema_describes_the_section(api_client, loaded):
    schema = api_client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    components = schema["components"]["schemas"]
    section = components["TurnTaking"]["properties"]
    assert set(section) == set(tt.TURN_TAKING_KEYS)
    assert section["min_interruption_ms"]["maximum"] == 5000 and section["fillers"]["maxItems"] == 10
    assert section["fillers"]["items"]["maxLength"] == 200
    assert set(components["TurnTakingRequest"]["properties"]) == set(tt.TURN_TAKING_KEYS)
    refs = {
        "Agent": "#/components/schemas/TurnTaking",
        "AgentCreateRequest": "#/components/schemas/TurnTakingRequest",
        "RuntimeSettingsRequest": "#/components/schemas/TurnTakingRequest",  # PUT /agents/{name}
    }
    for name, ref in refs.items():
        assert ref in json.dumps(components[name]["properties"]["turn_taking"]), name


def test_parse_agent_builds_the_spec_from_flat_data():
    spec, problems = parse_agent({"name": "x", "prompt": "Hi.", "turn_taking": SECTION}, known_tools=TOOLS)
    assert not problems and spec is not None and spec.turn_taking == EXPECTED
