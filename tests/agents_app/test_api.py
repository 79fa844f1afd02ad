"""REST: agents, scenarios, sessions, profiles — bodies, every error status, hostile input."""

from __future__ import annotations

import pytest

from agents_app import sessions
from voiceagent.conversation.session import Turn

AGENT_KEYS = {
    "name",
    "description",
    "greeting",
    "handoff_trigger",
    "tools",
    "model",
    "temperature",
    "top_p",
    "max_tokens",
    "voice",
    "voice_style",
    "voice_rate",
    "source",
    "session_id",
}
SCENARIO_KEYS = {
    "name",
    "description",
    "start_agent",
    "agents",
    "handoffs",
    "agent_defaults",
    "source",
    "session_id",
}


def test_list_agents(api_client, loaded):
    body = api_client.get("/api/v1/agents").json()
    names = {a["name"] for a in body["agents"]}
    assert {"concierge", "auth_agent", "fraud_agent", "cards_agent", "assistant", "specialist"} <= names
    assert body["total"] == len(body["agents"])
    for agent in body["agents"]:
        assert set(agent) >= AGENT_KEYS and "prompt" not in agent
        assert agent["source"] == "file" and agent["session_id"] is None


def test_agent_detail_case_insensitive_with_prompt(api_client, loaded):
    body = api_client.get("/api/v1/agents/CONCIERGE").json()
    assert body["name"] == "concierge" and "company_name" in body["prompt"]
    assert body["handoff_trigger"] == "handoff_concierge"
    assert "handoff_auth_agent" in body["tools"]


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/agents/nobody",
        "/api/v1/scenarios/nothing",
        "/api/v1/sessions/unknown-session",
        "/api/v1/profiles/prof_missing",
    ],
)
def test_unknown_is_404_detail(api_client, loaded, url):
    response = api_client.get(url)
    assert response.status_code == 404
    assert set(response.json()) == {"detail"}


def test_put_agent_updates_and_persists_over_reload(api_client, loaded):
    response = api_client.put(
        "/api/v1/agents/concierge",
        {"temperature": 0.2, "voice": "en-US-JennyNeural", "max_tokens": 256},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert response.json()["temperature"] == 0.2 and response.json()["voice"] == "en-US-JennyNeural"
    from agents_app.catalog import catalog, sync_files

    sync_files()  # a restart re-applies the files...
    catalog.reload()
    body = api_client.get("/api/v1/agents/concierge").json()
    assert body["temperature"] == 0.2 and body["max_tokens"] == 256  # ...and the override survives
    assert catalog.agent("concierge").temperature == 0.2  # what conversations read on their next turn


@pytest.mark.parametrize(
    "payload",
    [
        {"temperature": 3},
        {"temperature": "hot"},
        {"top_p": -0.1},
        {"max_tokens": 0},
        {"max_tokens": 20000},
        {"voice_rate": "warp"},
        {"prompt": "take over"},
        {"voice": "/etc/passwd"},  # issue 31.2: a voice is a name from the allow-list
        {"voice": "this.x"},
        {},
        [1, 2],
        {"model": "x" * 500},
    ],
)
def test_put_agent_bad_values_400(api_client, loaded, payload):
    response = api_client.put("/api/v1/agents/concierge", payload, format="json")
    assert response.status_code == 400
    assert "detail" in response.json()


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"top_p": False}, "top_p"),  # DRF alone read false as 0.0
        ({"max_tokens": "5"}, "max_tokens"),  # and "5" as 5
        ({"temperature": "0.5"}, "temperature"),
        ({"model": 7}, "model"),  # and 7 as "7"
        ({"max_tokens": 1.5}, "max_tokens"),
    ],
)
def test_put_agent_refuses_a_value_of_another_json_type(api_client, loaded, payload, field):
    """The body is what the OpenAPI schema says: a value of another JSON type is a 400 naming the
    field, never coerced into a setting the caller did not send."""
    response = api_client.put("/api/v1/agents/concierge", payload, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["errors"]


def test_profile_body_must_be_an_object_with_text_ids(api_client, loaded):
    null_body = api_client.post("/api/v1/profiles/generate", "null", content_type="application/json")
    assert null_body.status_code == 400 and "detail" in null_body.json()
    number_id = api_client.post("/api/v1/profiles/generate", {"session_id": 0}, format="json")
    assert number_id.status_code == 400 and "session_id" in number_id.json()["errors"]
    assert api_client.post("/api/v1/profiles/generate").status_code == 201  # no body: the defaults


def test_put_unknown_agent_404(api_client, loaded):
    assert api_client.put("/api/v1/agents/ghost", {"temperature": 1}, format="json").status_code == 404


def new_agent(**extra):
    return {
        "session_id": "sess-1",
        "name": "pirate",
        "description": "talks like a pirate",
        "prompt": "You are a pirate working for {{ company_name }}.",
        "tools": ["end_conversation"],
        "greeting": "Ahoy!",
        **extra,
    }


def test_create_session_agent_visible_only_in_its_session(api_client, loaded):
    response = api_client.post(
        "/api/v1/agents", new_agent(temperature=1.1, handoff_trigger="handoff_pirate"), format="json"
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["source"] == "session" and body["session_id"] == "sess-1" and body["temperature"] == 1.1
    assert "pirate" not in {a["name"] for a in api_client.get("/api/v1/agents").json()["agents"]}
    listed = api_client.get("/api/v1/agents?session_id=sess-1").json()
    assert "pirate" in {a["name"] for a in listed["agents"]}
    assert "pirate" not in {
        a["name"] for a in api_client.get("/api/v1/agents?session_id=other").json()["agents"]
    }
    assert (
        api_client.get("/api/v1/agents/pirate?session_id=sess-1")
        .json()["prompt"]
        .startswith("You are a pirate")
    )
    assert api_client.get("/api/v1/agents/pirate").status_code == 404


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (new_agent(tools=["launch_missiles"]), "tools"),
        (new_agent(name="Concierge"), "name"),
        (new_agent(handoff_trigger="handoff_concierge"), "handoff_trigger"),
        (new_agent(prompt="   "), "prompt"),
        (new_agent(prompt="{% if %}"), "prompt"),
        (new_agent(prompt="Hi {{ no_such_variable }}"), "prompt"),
        (new_agent(prompt="{{ ''.__class__.__mro__ }}"), "prompt"),
        (new_agent(session_id="bad id!"), "session_id"),
        (new_agent(name="x" * 100), "name"),
        (new_agent(temperature=9), "temperature"),
        (new_agent(voice="/etc/passwd"), "voice"),
        (new_agent(voice="antigravity"), "voice"),
        (new_agent(unexpected="field"), "unexpected"),
        ({k: v for k, v in new_agent().items() if k != "prompt"}, "prompt"),
    ],
)
def test_create_agent_errors(api_client, loaded, payload, field):
    response = api_client.post("/api/v1/agents", payload, format="json")
    assert response.status_code == 400, response.json()
    body = response.json()
    assert "detail" in body and field in body.get("errors", {}), body


def test_create_agent_name_clash_in_session(api_client, loaded):
    assert api_client.post("/api/v1/agents", new_agent(), format="json").status_code == 201
    assert api_client.post("/api/v1/agents", new_agent(), format="json").status_code == 400


def test_put_session_agent(api_client, loaded):
    api_client.post("/api/v1/agents", new_agent(), format="json")
    response = api_client.put("/api/v1/agents/pirate?session_id=sess-1", {"temperature": 0.1}, format="json")
    assert response.status_code == 200 and response.json()["temperature"] == 0.1


def test_scenarios_list_and_detail(api_client, loaded):
    body = api_client.get("/api/v1/scenarios").json()
    assert {"banking", "default"} <= {x["name"] for x in body["scenarios"]} and body["total"] >= 2
    banking = api_client.get("/api/v1/scenarios/Banking").json()
    assert set(banking) >= SCENARIO_KEYS
    assert banking["start_agent"] == "concierge"
    edge = {"from": "concierge", "to": "auth_agent", "tool": "handoff_auth_agent", "type": "announced"}
    assert edge in banking["handoffs"]
    assert {
        "from": "auth_agent",
        "to": "fraud_agent",
        "tool": "handoff_fraud_agent",
        "type": "discrete",
    } in banking["handoffs"]
    assert banking["agent_defaults"]["company_name"] == "Contoso Bank"


def new_scenario(**extra):
    return {
        "session_id": "sess-2",
        "name": "mini",
        "start_agent": "assistant",
        "agents": ["assistant", "specialist"],
        "handoffs": [
            {"from": "assistant", "to": "specialist", "tool": "handoff_specialist", "type": "discrete"}
        ],
        "agent_defaults": {"company_name": "Fabrikam"},
        **extra,
    }


def test_create_session_scenario(api_client, loaded):
    response = api_client.post("/api/v1/scenarios", new_scenario(), format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["source"] == "session" and response.json()["session_id"] == "sess-2"
    assert api_client.get("/api/v1/scenarios/mini").status_code == 404
    assert api_client.get("/api/v1/scenarios/mini?session_id=sess-2").json()["agent_defaults"] == {
        "company_name": "Fabrikam"
    }


@pytest.mark.parametrize(
    "payload",
    [
        new_scenario(start_agent="concierge"),
        new_scenario(handoffs=[{"from": "assistant", "to": "cards_agent", "tool": "handoff_cards_agent"}]),
        new_scenario(handoffs=[{"from": "assistant", "to": "specialist", "tool": "nope_tool"}]),
        new_scenario(
            handoffs=[{"from": "assistant", "to": "specialist", "tool": "handoff_specialist", "type": "loud"}]
        ),
        new_scenario(agents=["assistant", "ghost"]),
        new_scenario(name="banking"),
        new_scenario(agents=[]),
        new_scenario(session_id=""),
    ],
)
def test_create_scenario_errors(api_client, loaded, payload):
    response = api_client.post("/api/v1/scenarios", payload, format="json")
    assert response.status_code == 400, response.json()
    assert "detail" in response.json()


def test_session_state_history_and_reset(api_client, loaded):
    state = sessions.create_session("call-42", "banking", "concierge", transport="phone")
    state.memory["caller_name"] = "Ada"
    sessions.save_state(state)
    sessions.write_turn("call-42", Turn(role="user", content="I lost my card", agent="concierge"))
    sessions.write_turn(
        "call-42", Turn(role="tool", content='{"ok": true}', agent="cards_agent", tool_name="block_card")
    )
    body = api_client.get("/api/v1/sessions/call-42").json()
    assert (
        body["session_id"] == "call-42"
        and body["scenario"] == "banking"
        and body["active_agent"] == "concierge"
    )
    assert body["transport"] == "phone" and body["memory"]["caller_name"] == "Ada"
    assert body["history"][0] == {
        "role": "user",
        "content": "I lost my card",
        "agent": "concierge",
        "at": body["history"][0]["at"],
    }
    assert body["history"][1]["tool_name"] == "block_card"
    assert body["created_at"].endswith("Z")

    reset = api_client.post("/api/v1/sessions/call-42/reset")
    assert reset.status_code == 201
    new = reset.json()
    assert new["previous_session_id"] == "call-42" and new["session_id"] != "call-42"
    assert new["scenario"] == "banking" and new["active_agent"] == "concierge"
    fresh = api_client.get(f"/api/v1/sessions/{new['session_id']}").json()
    assert fresh["history"] == [] and fresh["memory"] == {}
    assert len(api_client.get("/api/v1/sessions/call-42").json()["history"]) == 2  # old history readable


def test_reset_drops_session_scoped_agents_from_old_id(api_client, loaded):
    api_client.post("/api/v1/agents", new_agent(session_id="s-old"), format="json")
    api_client.post(
        "/api/v1/scenarios",
        new_scenario(session_id="s-old", agents=["assistant", "pirate"], start_agent="pirate", handoffs=[]),
        format="json",
    )
    state = sessions.load_state("s-old")
    state.scenario = "mini"
    sessions.save_state(state)
    new_id = api_client.post("/api/v1/sessions/s-old/reset").json()["session_id"]
    assert "pirate" not in {
        a["name"] for a in api_client.get("/api/v1/agents?session_id=s-old").json()["agents"]
    }
    assert api_client.get(f"/api/v1/scenarios/mini?session_id={new_id}").status_code == 200


@pytest.mark.parametrize("sid", ["bad id", "x" * 129, "semi;colon", "%00"])
def test_hostile_session_ids(api_client, loaded, sid):
    assert api_client.get(f"/api/v1/sessions/{sid}").status_code in (400, 404)
    assert api_client.post(f"/api/v1/sessions/{sid}/reset").status_code in (400, 404)


def test_reset_unknown_session_404(api_client, loaded):
    assert api_client.post("/api/v1/sessions/never-was/reset").status_code == 404


def test_profiles_generate_and_get(api_client, loaded):
    response = api_client.post("/api/v1/profiles/generate", {"seed": 7}, format="json")
    assert response.status_code == 201
    profile = response.json()
    again = api_client.post("/api/v1/profiles/generate", {"seed": 7}, format="json").json()
    strip = lambda p: {k: v for k, v in p.items() if k not in ("created_at", "expires_at")}  # noqa: E731
    assert strip(profile) == strip(again)
    assert api_client.get(f"/api/v1/profiles/{profile['id']}").json()["full_name"] == profile["full_name"]
    for key in (
        "id",
        "full_name",
        "email",
        "phone_number",
        "institution_name",
        "client_id",
        "accounts",
        "mfa",
        "verification",
        "created_at",
        "expires_at",
    ):
        assert key in profile


def test_profile_expired_is_404(api_client, loaded):
    import datetime as dt

    from django.utils import timezone

    from agents_app.models import DemoProfile

    profile = api_client.post("/api/v1/profiles/generate", {}, format="json").json()
    DemoProfile.objects.filter(id=profile["id"]).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert api_client.get(f"/api/v1/profiles/{profile['id']}").status_code == 404


def test_profile_with_session_becomes_the_caller(api_client, loaded):
    profile = api_client.post(
        "/api/v1/profiles/generate", {"seed": 3, "session_id": "web-1"}, format="json"
    ).json()
    session = api_client.get("/api/v1/sessions/web-1").json()
    assert session["scenario"] == "banking"
    assert session["memory"]["caller_name"] == profile["full_name"]
    assert "verification" not in session["memory"]["caller_profile"]  # verification data is never shown


@pytest.mark.parametrize(
    "payload",
    [{"scenario": "casino"}, {"seed": -1}, {"seed": "abc"}, {"session_id": "a b"}, {"extra": 1}, [1]],
)
def test_profile_bad_input(api_client, loaded, payload):
    response = api_client.post("/api/v1/profiles/generate", payload, format="json")
    assert response.status_code == 400 and "detail" in response.json()


def test_agents_schema_paths(api_client, loaded):
    paths = api_client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()["paths"]
    for path in (
        "/api/v1/agents",
        "/api/v1/agents/{name}",
        "/api/v1/scenarios",
        "/api/v1/scenarios/{name}",
        "/api/v1/sessions/{session_id}",
        "/api/v1/sessions/{session_id}/reset",
        "/api/v1/profiles/generate",
        "/api/v1/profiles/{profile_id}",
    ):
        assert path in paths


def test_put_reaches_another_workers_catalog(api_client, loaded):
    """Another worker's catalog notices the shared version bump and reloads on its next read."""
    from agents_app.catalog import Catalog

    other = Catalog()
    other.reload()
    assert other.agent("cards_agent").temperature != 1.5
    api_client.put("/api/v1/agents/cards_agent", {"temperature": 1.5}, format="json")
    other._checked_at = 0  # its once-a-second check is due
    assert other.agent("cards_agent").temperature == 1.5
