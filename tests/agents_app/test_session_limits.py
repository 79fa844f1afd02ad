"""Documented limits on what a session defines for itself, and typed ``agent_defaults`` (issue 31,
point 7): before, 150 agents with 19 KB prompts were accepted in one session, and
``agent_defaults`` took ``{"temperature": "x", "__class__": {}}``."""

from __future__ import annotations

import pytest

from agents_app.session_limits import MAX_PROMPT_CHARS, MAX_SESSION_AGENTS, MAX_SESSION_SCENARIOS


def agent(name: str, session_id: str = "limits-1", prompt: str = "You help.") -> dict:
    return {"session_id": session_id, "name": name, "prompt": prompt}


def scenario(name: str, session_id: str = "limits-1", **extra) -> dict:
    return {
        "session_id": session_id,
        "name": name,
        "start_agent": "assistant",
        "agents": ["assistant"],
        **extra,
    }


def test_a_session_holds_at_most_its_limit_of_agents(api_client, loaded):
    for index in range(MAX_SESSION_AGENTS):
        response = api_client.post("/api/v1/agents", agent(f"helper{index}"), format="json")
        assert response.status_code == 201, response.json()
    refused = api_client.post("/api/v1/agents", agent("one_more"), format="json")
    assert refused.status_code == 400 and "limit" in refused.json()["detail"], refused.json()
    assert str(MAX_SESSION_AGENTS) in refused.json()["errors"]["session_id"][0]
    other = api_client.post("/api/v1/agents", agent("one_more", session_id="limits-2"), format="json")
    assert other.status_code == 201  # the limit is per session


def test_a_session_holds_at_most_its_limit_of_scenarios(api_client, loaded):
    for index in range(MAX_SESSION_SCENARIOS):
        response = api_client.post("/api/v1/scenarios", scenario(f"mine{index}"), format="json")
        assert response.status_code == 201, response.json()
    refused = api_client.post("/api/v1/scenarios", scenario("one_more"), format="json")
    assert refused.status_code == 400 and "limit" in refused.json()["detail"], refused.json()


def test_a_session_agents_prompt_is_bounded(api_client, loaded):
    too_long = api_client.post(
        "/api/v1/agents", agent("wordy", prompt="x" * (MAX_PROMPT_CHARS + 1)), format="json"
    )
    assert too_long.status_code == 400 and "prompt" in too_long.json()["errors"], too_long.json()
    at_limit = api_client.post("/api/v1/agents", agent("wordy", prompt="x" * MAX_PROMPT_CHARS), format="json")
    assert at_limit.status_code == 201, at_limit.json()


@pytest.mark.parametrize(
    ("defaults", "field"),
    [
        ({"temperature": "x"}, "agent_defaults.temperature"),  # an agent setting, not a variable
        ({"__class__": {}}, "agent_defaults.__class__"),
        ({"_private": "x"}, "agent_defaults._private"),
        ({"memory": "x"}, "agent_defaults.memory"),  # filled by the session
        ({"company_name": {"nested": 1}}, "agent_defaults.company_name"),
        ({"company_name": ["a"]}, "agent_defaults.company_name"),
        ({"company_name": "x" * 2001}, "agent_defaults.company_name"),
        ({f"v{i}": i for i in range(51)}, "agent_defaults"),
    ],
)
def test_agent_defaults_are_typed_template_variables(api_client, loaded, defaults, field):
    response = api_client.post("/api/v1/scenarios", scenario("typed", agent_defaults=defaults), format="json")
    assert response.status_code == 400, response.json()
    message = response.json()["errors"]["agent_defaults"][0]
    assert message.startswith(field) if "." in field else "at most 50" in message, response.json()


def test_valid_agent_defaults_are_kept(api_client, loaded):
    defaults = {"company_name": "Fabrikam", "max_attempts": 3, "rate": 1.5, "open": True, "note": None}
    response = api_client.post("/api/v1/scenarios", scenario("typed", agent_defaults=defaults), format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["agent_defaults"] == defaults
