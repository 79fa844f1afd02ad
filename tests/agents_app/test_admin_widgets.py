"""The admin's widgets: tools picked from a grouped, described, filterable list; model settings as
numbers with their limits; a scenario's agents and start agent as choices; handoff rows as
selects; every problem on the field it belongs to."""

from __future__ import annotations

import re

import pytest

from agents_app.models import Agent, Scenario
from mcp_app.models import McpServer
from voiceagent.conversation.tools import REGISTRY
from voiceagent.conversation.tools.values import ToolSpec

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(client, django_user_model, loaded):
    client.force_login(django_user_model.objects.create_superuser("w", "w@example.com", "pw-123456-xyz"))
    return client


@pytest.fixture
def crm_server(db):
    """A runtime MCP server with one tool in the registry (as mcp_app registers them)."""
    McpServer.objects.create(name="crm", url="http://127.0.0.1:9/mcp")

    async def lookup(**_kwargs):
        return {}

    spec = ToolSpec(
        name="crm_lookup_customer",
        description="Find a customer by phone number in the CRM.",
        parameters={"type": "object", "properties": {}},
        func=lookup,
        source="mcp",
        server="crm",
    )
    REGISTRY.register(spec, replace=True)
    yield spec
    REGISTRY.unregister(spec.name)


def form_errors(response) -> dict:
    assert response.status_code == 200, response.status_code
    return response.context["adminform"].form.errors


def agent_data(**extra) -> dict:
    data = {
        "name": "billing_agent",
        "description": "Billing",
        "greeting": "",
        "return_greeting": "",
        "handoff_trigger": "",
        "tools": ["end_conversation"],
        "prompt": "You help with billing.",
        "model": "",
        "temperature": "",
        "top_p": "",
        "max_tokens": "",
        "voice": "",
        "voice_style": "",
        "voice_rate": "",
        "vad_silence_timeout_ms": "",
    }
    data.update(extra)
    return data


def test_tools_are_a_grouped_described_filterable_checkbox_list(staff, crm_server):
    html = staff.get("/admin/agents_app/agent/add/").content.decode()
    picker = html[html.index('class="tool-picker"') :]
    picker = picker[: picker.index("</div>\n</div>") if "</div>\n</div>" in picker else len(picker)]
    groups = re.findall(r"<legend>([^<]+)</legend>", html)
    assert groups[:2] == ["Built-in tools", "Handoffs"] and "MCP server crm" in groups
    assert 'type="checkbox" name="tools" value="end_conversation"' in html
    assert "end_conversation — End the call after saying goodbye." in html
    assert "handoff_auth_agent — hand the caller to auth_agent" in html
    assert 'value="crm"' in html and "crm — every tool of this MCP server" in html
    assert "crm_lookup_customer — Find a customer by phone number in the CRM." in html
    assert 'class="tool-filter"' in html and "agents_app/tool_picker.js" in html
    assert 'name="tools"' in picker


def test_picked_tools_are_saved_as_a_list(staff, crm_server):
    data = agent_data(tools=["end_conversation", "crm_lookup_customer", "handoff_auth_agent"])
    response = staff.post("/admin/agents_app/agent/add/", data)
    assert response.status_code == 302, form_errors(response)
    assert Agent.objects.get(name="billing_agent").tools == [
        "end_conversation",
        "crm_lookup_customer",
        "handoff_auth_agent",
    ]


def test_a_tool_that_is_gone_stays_visible_and_is_refused_on_the_tools_field(staff):
    errors = form_errors(staff.post("/admin/agents_app/agent/add/", agent_data(tools=["launch_missiles"])))
    assert list(errors) == ["tools"] and "unknown tool" in errors["tools"][0]
    html = staff.post("/admin/agents_app/agent/add/", agent_data(tools=["launch_missiles"])).content.decode()
    assert "<legend>Not available now</legend>" in html


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("temperature", "7", "less than or equal to 2"),
        ("top_p", "-0.1", "greater than or equal to 0"),
        ("max_tokens", "20000", "less than or equal to 16384"),
        ("vad_silence_timeout_ms", "5", "greater than or equal to 100"),
    ],
)
def test_model_settings_are_numbers_with_limits(staff, field, value, message):
    html = staff.get("/admin/agents_app/agent/add/").content.decode()
    assert re.search(rf'<input type="number" name="{field}"[^>]* min="', html), field
    errors = form_errors(staff.post("/admin/agents_app/agent/add/", agent_data(**{field: value})))
    assert list(errors) == [field] and message in errors[field][0]


def scenario_data(**extra) -> dict:
    data = {
        "name": "desk",
        "description": "",
        "start_agent": "assistant",
        "agents": ["assistant", "specialist"],
        "agent_defaults": '{"company_name": "Contoso"}',
        "transfer_target": "",
        "recording": "unknown",
        "recording_announcement": "",
        "handoffs-TOTAL_FORMS": "1",
        "handoffs-INITIAL_FORMS": "0",
        "handoffs-MIN_NUM_FORMS": "0",
        "handoffs-MAX_NUM_FORMS": "1000",
        "handoffs-0-from_agent": "assistant",
        "handoffs-0-to_agent": "specialist",
        "handoffs-0-tool": "handoff_specialist",
        "handoffs-0-type": "discrete",
    }
    data.update(extra)
    return data


def test_scenario_agents_start_agent_and_handoff_rows_are_choices(staff):
    row = Scenario.objects.get(name="banking")
    html = staff.get(f"/admin/agents_app/scenario/{row.pk}/change/").content.decode()
    assert 'type="checkbox" name="agents" value="fraud_agent"' in html
    assert re.search(r'<select name="start_agent"[^>]*>', html)
    assert re.search(r'<option value="concierge" selected>concierge', html)
    for field in ("from_agent", "to_agent", "tool", "type"):
        assert re.search(rf'<select name="handoffs-0-{field}"', html), field
    assert "handoff_fraud_agent (to fraud_agent)" in html


def test_a_scenario_saved_from_choices(staff):
    response = staff.post("/admin/agents_app/scenario/add/", scenario_data())
    assert response.status_code == 302, form_errors(response)
    row = Scenario.objects.get(name="desk")
    assert row.agents == ["assistant", "specialist"] and row.start_agent == "assistant"
    assert [(h.from_agent, h.to_agent, h.tool, h.type) for h in row.handoffs.all()] == [
        ("assistant", "specialist", "handoff_specialist", "discrete")
    ]


def test_a_start_agent_outside_the_scenario_is_refused_on_its_field(staff):
    errors = form_errors(
        staff.post("/admin/agents_app/scenario/add/", scenario_data(start_agent="concierge"))
    )
    assert list(errors) == ["start_agent"] and "not among the scenario's agents" in errors["start_agent"][0]


def test_a_handoff_problem_is_on_its_rows_field(staff):
    response = staff.post(
        "/admin/agents_app/scenario/add/", scenario_data(**{"handoffs-0-to_agent": "cards_agent"})
    )
    assert response.status_code == 200
    formset = response.context["inline_admin_formsets"][0].formset
    assert formset.forms[0].errors and "to_agent" in formset.forms[0].errors, formset.forms[0].errors
    assert not Scenario.objects.filter(name="desk").exists()


def test_problems_say_what_they_mean(staff):
    row = Agent.objects.get(name="concierge")
    assert (
        "none: the service uses it" in staff.get(f"/admin/agents_app/agent/{row.pk}/change/").content.decode()
    )
    row.problems = ["prompt: <b>undefined</b> variable"]
    row.save()
    html = staff.get(f"/admin/agents_app/agent/{row.pk}/change/").content.decode()
    assert "Not served: the service ignores it until these are fixed." in html
    assert "&lt;b&gt;undefined&lt;/b&gt;" in html and "validation problems: not served" not in html
