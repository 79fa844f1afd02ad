"""Admin: create and edit agents and scenarios with the loader's validators; history read-only."""

from __future__ import annotations

import pytest

from agents_app.models import Agent, Scenario


@pytest.fixture
def admin_client(client, django_user_model, loaded):
    user = django_user_model.objects.create_superuser("ops", "ops@example.com", "pw-123456-xyz")
    client.force_login(user)
    return client


def agent_form(**extra):
    data = {
        "name": "billing_agent",
        "description": "Billing questions",
        "greeting": "Hi, billing here.",
        "return_greeting": "",
        "handoff_trigger": "handoff_billing_agent",
        "tools": ["end_conversation"],
        "prompt": "You help with billing at {{ company_name }}.",
        "model": "",
        "temperature": "0.4",
        "top_p": "",
        "max_tokens": "",
        "voice": "",
        "voice_style": "",
        "voice_rate": "",
        "vad_silence_timeout_ms": "",
    }
    data.update(extra)
    return data


def test_changelists_render(admin_client):
    for model in ("agent", "scenario", "session", "historyturn", "demoprofile"):
        response = admin_client.get(f"/admin/agents_app/{model}/?q=a")
        assert response.status_code == 200, model


def test_create_agent_through_admin(admin_client):
    response = admin_client.post("/admin/agents_app/agent/add/", agent_form())
    assert response.status_code == 302, response.content.decode()[:2000]
    row = Agent.objects.get(name="billing_agent")
    assert row.source == "admin" and row.temperature == 0.4
    from agents_app.catalog import catalog

    catalog.reload()
    assert catalog.agent("billing_agent").handoff_trigger == "handoff_billing_agent"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"tools": ["launch_missiles"]}, "unknown tool"),
        ({"prompt": "{% if %}"}, "syntax"),
        ({"prompt": "Hello {{ secret_thing }}"}, "undefined"),
        ({"temperature": "7"}, "temperature"),
        ({"handoff_trigger": "handoff_concierge"}, "already used"),
        ({"name": "concierge"}, "already exists"),
    ],
)
def test_admin_shows_validation_errors(admin_client, extra, message):
    response = admin_client.post("/admin/agents_app/agent/add/", agent_form(**extra))
    assert response.status_code == 200  # form re-rendered
    assert message in response.content.decode()
    assert not Agent.objects.filter(name="billing_agent").exists()


def test_edit_file_agent_becomes_override(admin_client):

    from agents_app.models import AGENT_FIELDS

    row = Agent.objects.get(name="concierge")
    current = {f: getattr(row, f) for f in AGENT_FIELDS}
    from agents_app.admin_forms import turn_taking_initial

    data = {f: ("" if v is None else v) for f, v in current.items() if f != "turn_taking"}
    data.update(turn_taking_initial(row.turn_taking))  # the typed fields as the page shows them
    data.update(name="concierge", greeting="Welcome to Contoso!")
    response = admin_client.post(f"/admin/agents_app/agent/{row.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    row.refresh_from_db()
    assert row.overrides == {"greeting": "Welcome to Contoso!"}
    from agents_app.catalog import sync_files

    sync_files()
    row.refresh_from_db()
    assert row.greeting == "Welcome to Contoso!"  # survives the restart-time re-apply


def scenario_form(scenario: Scenario, handoffs: list[dict], **extra):
    data = {
        "name": scenario.name,
        "description": scenario.description,
        "start_agent": scenario.start_agent,
        "agents": list(scenario.agents),
        "agent_defaults": "\n".join(f"{k} = {v}" for k, v in scenario.agent_defaults.items()),
        "handoffs-TOTAL_FORMS": str(len(handoffs)),
        "handoffs-INITIAL_FORMS": "0",
        "handoffs-MIN_NUM_FORMS": "0",
        "handoffs-MAX_NUM_FORMS": "1000",
    }
    for i, h in enumerate(handoffs):
        for key, value in h.items():
            data[f"handoffs-{i}-{key}"] = value
    data.update(extra)
    return data


def test_scenario_admin_inline_validation(admin_client):
    base = Scenario.objects.get(name="default")
    bad = scenario_form(
        base,
        [{"from_agent": "assistant", "to_agent": "specialist", "tool": "nope", "type": "announced"}],
        name="copy",
    )
    response = admin_client.post("/admin/agents_app/scenario/add/", bad)
    assert response.status_code == 200 and "tool" in response.content.decode()
    assert not Scenario.objects.filter(name="copy").exists()
    good = scenario_form(
        base,
        [
            {
                "from_agent": "assistant",
                "to_agent": "specialist",
                "tool": "handoff_specialist",
                "type": "discrete",
            }
        ],
        name="copy",
    )
    response = admin_client.post("/admin/agents_app/scenario/add/", good)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Scenario.objects.get(name="copy").handoffs.get().type == "discrete"


def test_history_is_read_only(admin_client):
    from agents_app import sessions
    from voiceagent.conversation.session import Turn

    sessions.create_session("adm-1", "banking", "concierge")
    sessions.write_turn("adm-1", Turn(role="user", content="hello"))
    page = admin_client.get("/admin/agents_app/session/adm-1/change/").content.decode()
    assert "hello" in page
    assert admin_client.get("/admin/agents_app/historyturn/add/").status_code == 403


def test_a_scenarios_template_variables_are_name_value_lines(admin_client):
    """``agent_defaults`` is typed as ``name = value`` lines, not JSON: the page shows the stored
    variables that way, they are read back with their types, and a wrong line or a name the loader
    refuses is an error on that field."""
    base = Scenario.objects.get(name="default")
    kept = dict(base.agent_defaults)  # what the default scenario's prompts use
    base.agent_defaults = {**kept, "bank_name": "Contoso", "limit": 500}
    base.save()
    page = admin_client.get(f"/admin/agents_app/scenario/{base.pk}/change/").content.decode()
    assert "bank_name = Contoso\nlimit = 500" in page and "{&quot;bank_name" not in page
    lines = 'bank_name = Contoso Bank\nlimit = 750\nstrict = true\nmotto = "first line\\nsecond"'
    lines += "".join(f"\n{k} = {v}" for k, v in kept.items())
    response = admin_client.post("/admin/agents_app/scenario/add/", scenario_form(base, [], name="vars"))
    assert response.status_code == 302, response.context["adminform"].form.errors
    row = Scenario.objects.get(name="vars")
    form = scenario_form(row, [], agent_defaults=lines)
    response = admin_client.post(f"/admin/agents_app/scenario/{row.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    row.refresh_from_db()
    assert row.agent_defaults == {
        **kept,
        "bank_name": "Contoso Bank",
        "limit": 750,
        "strict": True,
        "motto": "first line\nsecond",
    }
    for wrong, said in (
        ("bank_name Contoso", "line 1: write name = value"),
        # filled by the session: the loader's rule, on this field
        ("memory = x" + "".join(f"\n{k} = {v}" for k, v in kept.items()), "memory"),
    ):
        response = admin_client.post(
            f"/admin/agents_app/scenario/{row.pk}/change/", scenario_form(row, [], agent_defaults=wrong)
        )
        errors = response.context["adminform"].form.errors
        assert response.status_code == 200 and said in " ".join(errors.get("agent_defaults", [])), errors
