"""A scenario's ``recording`` and ``recording_announcement``: validated in files and in
POST /scenarios, carried by the spec, the catalog record, the database row and back."""

from __future__ import annotations

import pytest

from agents_app.catalog import scenario_from_record, scenario_record, spec_from_scenario_row
from agents_app.definitions import parse_scenario
from agents_app.models import Scenario
from voiceagent.conversation.specs import AgentSpec

AGENTS = {"a": AgentSpec(name="a", prompt_template="You help.")}
BASE = {"name": "rec", "start_agent": "a", "agents": ["a"]}


def test_the_fields_reach_the_spec_and_the_record():
    spec, problems = parse_scenario(
        {**BASE, "recording": True, "recording_announcement": " This call is recorded. "},
        AGENTS,
        strict_keys=True,
    )
    assert problems == [] and spec is not None
    assert (spec.recording, spec.recording_announcement) == (True, "This call is recorded.")
    record = scenario_record(spec)
    assert record["recording"] is True and record["recording_announcement"] == "This call is recorded."
    assert scenario_from_record(record).recording is True
    plain, _ = parse_scenario(BASE, AGENTS, strict_keys=True)
    assert plain is not None and (plain.recording, plain.recording_announcement) == (None, "")


@pytest.mark.parametrize(
    ("field", "value"),
    [("recording", "yes"), ("recording_announcement", 5), ("recording_announcement", "x" * 501)],
)
def test_bad_values_are_problems(field, value):
    spec, problems = parse_scenario({**BASE, field: value}, AGENTS, strict_keys=True)
    assert spec is None and [p.field for p in problems] == [field]


@pytest.mark.django_db
def test_the_database_row_carries_them():
    row = Scenario.objects.create(
        name="rec", start_agent="a", agents=["a"], recording=True, recording_announcement="Recorded."
    )
    spec = spec_from_scenario_row(row)
    assert (spec.recording, spec.recording_announcement) == (True, "Recorded.")


def test_post_scenarios_takes_them(api_client, loaded):
    body = {
        "session_id": "sess-rec",
        "name": "mini",
        "start_agent": "assistant",
        "agents": ["assistant"],
        "recording": True,
        "recording_announcement": "This call is recorded.",
    }
    response = api_client.post("/api/v1/scenarios", body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["recording"] is True
    detail = api_client.get("/api/v1/scenarios/mini?session_id=sess-rec").json()
    assert detail["recording_announcement"] == "This call is recorded."
    bad = api_client.post("/api/v1/scenarios", {**body, "name": "mini2", "recording": "often"}, format="json")
    assert bad.status_code == 400
