"""validate_agents, generate_profile, startup step 5 and the readiness agents check."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

BROKEN = Path(__file__).parent / "broken_fixtures"


def test_validate_agents_passes_on_shipped_fixtures(db):
    out = io.StringIO()
    call_command("validate_agents", stdout=out)
    assert "0 error(s)" in out.getvalue()


def test_validate_agents_reports_each_problem_with_file_and_field(db):
    out = io.StringIO()
    with pytest.raises(CommandError, match="error"):
        call_command("validate_agents", "--root", str(BROKEN), stdout=out)
    text = out.getvalue()
    expectations = [
        ("unknown_tool/agent.yaml", "tools[", "unknown tool"),
        ("missing_prompt/agent.yaml", "prompts.path", ""),
        ("yaml_syntax/agent.yaml", "", "line"),
        ("undefined_variable", "", "undefined"),
        ("scenarios/bad_start.yaml", "start_agent", ""),
        ("scenarios/bad_handoff_tool.yaml", "handoffs[0].tool", ""),
        ("scenarios/shared_trigger.yaml", "", "trigger"),
    ]
    for file_part, field_part, message_part in expectations:
        lines = [line for line in text.splitlines() if file_part in line]
        assert lines, f"no problem reported for {file_part}:\n{text}"
        assert any(field_part in line and message_part in line for line in lines), (file_part, lines)


def test_generate_profile_command(db):
    out = io.StringIO()
    call_command("generate_profile", "--seed", "11", stdout=out)
    profile = json.loads(out.getvalue())
    from agents_app.models import DemoProfile

    assert DemoProfile.objects.get(id=profile["id"]).full_name == profile["full_name"]


def test_startup_step_loads_agents_and_readiness_is_healthy(db):
    from django.core.cache import cache

    from agents_app.startup import _load_agents
    from agents_app.startup import agents_check as _agents_check

    cache.clear()
    note = _load_agents()
    assert "agents" in note and "scenarios served" in note
    status, detail = _agents_check()
    assert status == "healthy", detail


def test_invalid_definitions_are_skipped_and_reported(db, caplog):
    from django.core.cache import cache

    from agents_app.catalog import catalog, sync_files
    from agents_app.startup import agents_check as _agents_check

    cache.clear()
    sync_files()  # the good ones first, as on an earlier start
    with caplog.at_level("ERROR", logger="agents_app.catalog"):
        result = sync_files(BROKEN)
    catalog.reload()
    assert result.errors
    assert any("definition problem" in r.getMessage() for r in caplog.records)
    assert catalog.agent("good") is not None  # the valid one is served
    assert catalog.agent("unknown_tool") is None
    assert catalog.agent("concierge") is None  # its file is gone from this root: not served
    status, detail = _agents_check()
    assert status == "unhealthy" and "skipped" in detail
