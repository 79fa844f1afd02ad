"""Definition files: the shipped fixtures, every validation rule, merging and prompt rendering."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
from jinja2.exceptions import SecurityError

from agents_app.definitions import (
    SESSION_VARIABLES,
    LoadResult,
    Problem,
    allowed_variables_for,
    deep_merge,
    load_definitions,
    parse_agent,
    parse_scenario,
    prompt_variables,
    render_prompt,
    template_variables,
    validate_agent_fields,
    validate_scenario,
)
from voiceagent.conversation.specs import GENERIC_HANDOFF_TOOL, AgentSpec, HandoffMap, ScenarioSpec

PROJECT = Path(__file__).resolve().parents[2]
FIXTURES = PROJECT / "fixtures"
BROKEN = Path(__file__).resolve().parent / "broken_fixtures"

KNOWN_TOOLS = frozenset(
    {
        "verify_client_identity",
        "attach_demo_caller",
        "send_mfa_code",
        "verify_mfa_code",
        "get_account_summary",
        "get_recent_transactions",
        "block_card",
        "create_fraud_case",
        "escalate_to_human",
        "end_conversation",
    }
)


@pytest.fixture(scope="module")
def shipped() -> LoadResult:
    return load_definitions(FIXTURES, KNOWN_TOOLS)


@pytest.fixture(scope="module")
def broken() -> LoadResult:
    return load_definitions(BROKEN, KNOWN_TOOLS)


def problems_for(result: LoadResult, file_suffix: str) -> list[Problem]:
    return [p for p in result.problems if p.file.endswith(file_suffix)]


# ---------------------------------------------------------------------------------------------
# Shipped fixtures


def test_shipped_fixtures_load_without_problems(shipped):
    assert shipped.problems == [], "\n".join(map(str, shipped.problems))
    assert set(shipped.agents) == {
        "concierge",
        "auth_agent",
        "fraud_agent",
        "cards_agent",
        "assistant",
        "specialist",
    }
    assert set(shipped.scenarios) == {"banking", "default"}


def test_shipped_banking_agents(shipped):
    agents = shipped.agents
    triggers = {name: spec.handoff_trigger for name, spec in agents.items()}
    assert triggers["concierge"] == "handoff_concierge"
    assert triggers["auth_agent"] == "handoff_auth_agent"
    assert triggers["fraud_agent"] == "handoff_fraud_agent"
    assert triggers["cards_agent"] == "handoff_cards_agent"
    for name in ("auth_agent", "fraud_agent", "cards_agent"):
        assert "handoff_concierge" in agents[name].tools
        assert "end_conversation" in agents[name].tools
    assert {"verify_client_identity", "send_mfa_code", "verify_mfa_code"} <= set(agents["auth_agent"].tools)
    assert {"get_recent_transactions", "block_card", "create_fraud_case", "escalate_to_human"} <= set(
        agents["fraud_agent"].tools
    )
    assert {"get_account_summary", "block_card", "get_recent_transactions"} <= set(
        agents["cards_agent"].tools
    )
    assert {
        "handoff_auth_agent",
        "handoff_fraud_agent",
        "handoff_cards_agent",
        "escalate_to_human",
        "end_conversation",
    } <= set(agents["concierge"].tools)
    for spec in agents.values():
        assert spec.greeting and spec.return_greeting
        assert spec.source == "file"
        assert spec.origin.endswith("agent.yaml")


def test_shipped_defaults_are_merged(shipped):
    cards = shipped.agents["cards_agent"]  # sets no model settings of its own
    assert (cards.temperature, cards.top_p, cards.max_tokens) == (0.6, 0.9, 400)
    assert cards.model is None
    assert cards.vad_silence_timeout_ms is None
    fraud = shipped.agents["fraud_agent"]
    assert fraud.temperature == 0.3  # the agent's own value wins
    assert fraud.voice.style == "empathetic" and fraud.voice.rate == "-5%" and fraud.voice.name is None
    assert shipped.agents["concierge"].vad_silence_timeout_ms == 700


def test_shipped_scenarios(shipped):
    banking = shipped.scenarios["banking"]
    assert banking.start_agent == "concierge"
    assert set(banking.agents) == {"concierge", "auth_agent", "fraud_agent", "cards_agent"}
    assert banking.agent_defaults["company_name"] == "Contoso Bank"
    assert banking.transfer_target == "+15550009999"
    edges = {(h.from_agent, h.to_agent): h.type for h in banking.handoffs}
    assert edges[("concierge", "auth_agent")] == "announced"
    assert edges[("auth_agent", "fraud_agent")] == "discrete"
    assert edges[("auth_agent", "cards_agent")] == "discrete"
    assert edges[("fraud_agent", "cards_agent")] == "announced"
    for name in ("auth_agent", "fraud_agent", "cards_agent"):
        assert edges[(name, "concierge")] == "announced"
    default = shipped.scenarios["default"]
    assert default.start_agent == "assistant"
    assert sorted(h.type for h in default.handoffs) == ["announced", "discrete"]


def test_handoff_map_on_banking(shipped):
    handoffs = HandoffMap.build(shipped.scenarios["banking"], shipped.agents)
    to_auth = handoffs.resolve("concierge", "handoff_auth_agent")
    assert to_auth is not None
    assert (to_auth.to_agent, to_auth.type) == ("auth_agent", "announced")
    to_fraud = handoffs.resolve("auth_agent", "handoff_fraud_agent")
    assert to_fraud is not None
    assert (to_fraud.to_agent, to_fraud.type) == ("fraud_agent", "discrete")
    back = handoffs.resolve("fraud_agent", "handoff_concierge")
    assert back is not None and back.to_agent == "concierge"
    assert handoffs.resolve("concierge", "block_card") is None


def test_shipped_prompts_render_for_a_caller(shipped):
    banking = shipped.scenarios["banking"]
    memory = {"caller_name": "Ana Diaz", "client_id": "C-1001"}
    for name in banking.agents:
        text = render_prompt(
            shipped.agents[name].prompt_template,
            prompt_variables(banking, memory, session_id="s-1", agent_name=name),
        )
        assert "Contoso Bank" in text
        assert "Ana Diaz" in text
        assert "{{" not in text and "{%" not in text
        assert "\n\n\n" not in text


# ---------------------------------------------------------------------------------------------
# Broken fixtures: one problem each


AGENT_CASES = [
    ("agents/yaml_syntax/agent.yaml", "yaml", "line 4"),
    ("agents/duplicate_key/agent.yaml", "yaml", "duplicate key 'tools'"),
    ("agents/missing_name/agent.yaml", "name", "is required"),
    ("agents/empty_name/agent.yaml", "name", "must not be empty"),
    ("agents/tools_not_list/agent.yaml", "tools", "must be a list"),
    ("agents/tool_not_string/agent.yaml", "tools[1]", "must be a non-empty string"),
    ("agents/unknown_tool/agent.yaml", "tools[1]", "unknown tool 'transfer_money'"),
    ("agents/bad_temperature/agent.yaml", "temperature", "between 0.0 and 2.0"),
    ("agents/bad_top_p/agent.yaml", "top_p", "between 0.0 and 1.0"),
    ("agents/bad_max_tokens/agent.yaml", "max_tokens", "between 1 and 16384"),
    ("agents/max_tokens_not_int/agent.yaml", "max_tokens", "must be an integer"),
    ("agents/bad_vad/agent.yaml", "speech.vad_silence_timeout_ms", "between 100 and 10000"),
    ("agents/bad_voice_rate/agent.yaml", "voice.rate", "not a speaking rate"),
    ("agents/unknown_field/agent.yaml", "temprature", "did you mean 'temperature'"),
    ("agents/trigger_is_tool/agent.yaml", "handoff.trigger", "already a registered tool"),
    ("agents/missing_prompt/agent.yaml", "prompts.path", "prompt file not found: nowhere.jinja"),
    ("agents/prompt_outside/agent.yaml", "prompts.path", "points outside"),
    ("agents/no_prompts/agent.yaml", "prompts.path", "is required"),
    ("agents/template_syntax/prompt.jinja", "prompts.path", "template syntax error at line 3"),
    ("agents/undefined_variable/prompt.jinja", "prompts.path", "undefined variable 'bogus_variable'"),
    ("agents/missing_default/prompt.jinja", "prompts.path", "undefined variable 'company_name'"),
    ("agents/unsafe_template/prompt.jinja", "prompts.path", "private attributes"),
    ("agents/include_template/prompt.jinja", "prompts.path", "include"),
    ("agents/zz_duplicate_name/agent.yaml", "name", "duplicate agent name 'Good'"),
    ("agents/no_agent_file", "agent.yaml", "has no agent.yaml"),
]

SCENARIO_CASES = [
    ("scenarios/yaml_syntax.yaml", "yaml", "line 4"),
    ("scenarios/missing_name.yaml", "name", "is required"),
    ("scenarios/unknown_agent.yaml", "agents[1]", "'ghost' does not exist"),
    ("scenarios/invalid_agent_member.yaml", "agents[1]", "'bad_temperature' failed validation"),
    ("scenarios/needs_default.yaml", "agents[1]", "'missing_default' failed validation"),
    ("scenarios/shared_trigger.yaml", "agents", "share the handoff trigger 'handoff_other'"),
    ("scenarios/bad_start.yaml", "start_agent", "not among the scenario's agents"),
    ("scenarios/bad_handoff_from.yaml", "handoffs[0].from", "'nobody' is not among"),
    ("scenarios/bad_handoff_to.yaml", "handoffs[0].to", "'same_trigger' is not among"),
    ("scenarios/bad_handoff_type.yaml", "handoffs[0].type", "announced, discrete"),
    ("scenarios/bad_handoff_tool.yaml", "handoffs[0].tool", "does not hand off to 'other'"),
    ("scenarios/self_handoff.yaml", "handoffs[0]", "cannot hand off to itself"),
    ("scenarios/agent_defaults_not_mapping.yaml", "agent_defaults", "must be a mapping"),
    ("scenarios/unknown_field.yaml", "start_agnet", "did you mean 'start_agent'"),
    ("scenarios/zz_duplicate_name.yaml", "name", "duplicate scenario name 'Good'"),
]


@pytest.mark.parametrize(("file", "field", "message"), AGENT_CASES + SCENARIO_CASES)
def test_broken_fixture_reports_its_problem(broken, file, field, message):
    found = problems_for(broken, file)
    assert len(found) == 1, "\n".join(map(str, found)) or f"no problem for {file}"
    problem = found[0]
    assert problem.field == field
    assert message in problem.message
    assert problem.is_error
    assert str(problem) == f"{problem.file}: {field}: {problem.message}"


def test_broken_agents_and_scenarios_are_skipped(broken):
    assert set(broken.agents) == {"good", "other", "same_trigger"}
    assert set(broken.scenarios) == {"good", "handoff_tool_not_listed"}
    scenario = broken.scenarios["good"]
    assert scenario.agents == ("good", "other")
    assert HandoffMap.build(scenario, broken.agents).resolve("good", "handoff_other").to_agent == "other"


def test_every_problem_is_accounted_for(broken):
    covered = {file for file, _, _ in AGENT_CASES + SCENARIO_CASES}
    covered |= {"agents/_defaults.yaml", "scenarios/handoff_tool_not_listed.yaml"}
    stray = [p for p in broken.problems if not any(p.file.endswith(c) for c in covered)]
    assert stray == []


def test_handoff_tool_not_listed_is_a_warning(broken):
    (problem,) = problems_for(broken, "scenarios/handoff_tool_not_listed.yaml")
    assert problem.level == "warning" and not problem.is_error
    assert problem.field == "handoffs[0].tool"
    assert "does not list 'handoff_good'" in problem.message
    assert str(problem).endswith("(warning)")
    assert broken.warnings == [problem]
    assert "handoff_tool_not_listed" in broken.scenarios


def test_defaults_file_rejects_name(broken):
    (problem,) = problems_for(broken, "agents/_defaults.yaml")
    assert problem.field == "name"


def test_defaults_deep_merge_in_broken_root(broken):
    good = broken.agents["good"]
    assert good.voice.name == "en-US-DefaultNeural"  # from _defaults
    assert good.voice.style == "cheerful"  # the agent's own value
    assert good.max_tokens == 300 and good.temperature == 0.6
    assert good.tools == ("handoff_other", GENERIC_HANDOFF_TOOL, "end_conversation")  # list replaced
    assert broken.agents["other"].tools == ("end_conversation",)  # list inherited


def test_deep_merge_semantics():
    base = {"a": 1, "voice": {"name": "x", "style": "calm"}, "tools": ["t1", "t2"], "deep": {"k": {"x": 1}}}
    override = {"voice": {"style": "warm"}, "tools": ["t3"], "deep": {"k": {"y": 2}}, "b": None}
    merged = deep_merge(base, override)
    assert merged == {
        "a": 1,
        "voice": {"name": "x", "style": "warm"},
        "tools": ["t3"],
        "deep": {"k": {"x": 1, "y": 2}},
        "b": None,
    }
    assert base["voice"] == {"name": "x", "style": "calm"}  # inputs untouched
    merged["tools"].append("t4")
    assert override["tools"] == ["t3"]


def test_missing_root_is_a_problem(tmp_path):
    result = load_definitions(tmp_path / "nope", KNOWN_TOOLS)
    assert result.agents == {} and result.scenarios == {}
    assert result.problems[0].message == "definitions folder not found"


# ---------------------------------------------------------------------------------------------
# Validation functions on plain data (admin forms, REST)


def test_validate_agent_fields_flat_form_data():
    data = {
        "name": "helper",
        "prompt": "You help callers of {{ company_name }}.",
        "tools": ["end_conversation", "handoff_concierge"],
        "handoff_trigger": "handoff_helper",
        "temperature": 0.7,
        "voice": "en-US-AvaNeural",
        "voice_style": "friendly",
        "voice_rate": "+5%",
        "vad_silence_timeout_ms": 800,
    }
    assert (
        validate_agent_fields(
            data, file="admin", known_tools=KNOWN_TOOLS, handoff_triggers={"handoff_concierge"}
        )
        == []
    )
    spec, problems = parse_agent(
        data, file="admin", known_tools=KNOWN_TOOLS, handoff_triggers={"handoff_concierge"}, source="admin"
    )
    assert problems == []
    assert spec.voice.name == "en-US-AvaNeural" and spec.voice.rate == "+5%"
    assert spec.vad_silence_timeout_ms == 800 and spec.source == "admin"

    bad = dict(data, temperature=True, vad_silence_timeout_ms=20000, prompt="  ", tools=["nope"])
    problems = validate_agent_fields(bad, file="admin", known_tools=KNOWN_TOOLS)
    fields = {p.field: p.message for p in problems}
    assert "must be a number" in fields["temperature"]
    assert "between 100 and 10000" in fields["vad_silence_timeout_ms"]
    assert "empty" in fields["prompt"]
    assert "unknown tool 'nope'" in fields["tools[0]"]


def test_validate_agent_fields_variables_and_tool_prefixes():
    data = {"name": "x", "prompt": "Hi {{ caller_name }} from {{ company_name }}", "tools": ["crm_lookup"]}
    problems = validate_agent_fields(
        data, known_tools=KNOWN_TOOLS, tool_prefixes=["crm"], allowed_variables=SESSION_VARIABLES
    )
    assert [(p.field, "company_name" in p.message) for p in problems] == [("prompt", True)]
    assert validate_agent_fields(data, known_tools=KNOWN_TOOLS, tool_prefixes=["crm"]) == []


def test_allowed_variables_is_the_intersection_of_scenarios():
    one = ScenarioSpec("one", "a", ("a",), agent_defaults={"company_name": "X", "hours": "9-5"})
    two = {"name": "two", "agents": ["a", "b"], "agent_defaults": {"company_name": "Y"}}
    allowed = allowed_variables_for("a", [one, two])
    assert "company_name" in allowed and "hours" not in allowed
    assert allowed >= SESSION_VARIABLES
    assert allowed_variables_for("zzz", [one, two]) == set(SESSION_VARIABLES)


def _agent(name, trigger, tools=(), prompt="Hello."):
    return AgentSpec(name=name, prompt_template=prompt, handoff_trigger=trigger, tools=tuple(tools))


def test_validate_scenario_on_plain_data():
    agents = {
        "a": _agent("a", "handoff_a", ["handoff_b"], prompt="For {{ company_name }}."),
        "b": _agent("b", "handoff_b", ["handoff_a"]),
    }
    data = {
        "name": "s",
        "start_agent": "a",
        "agents": ["a", "b"],
        "handoffs": [
            {"from": "a", "to": "b", "tool": "handoff_b", "type": "discrete"},
            {"from": "b", "to": "a", "tool": GENERIC_HANDOFF_TOOL},
        ],
        "agent_defaults": {"company_name": "Z"},
    }
    spec, problems = parse_scenario(data, agents, source="session", session_id="s-9")
    assert problems[0].level == "warning"  # b does not list handoff_to_agent
    assert len(problems) == 1
    assert spec.handoffs[0].type == "discrete" and spec.handoffs[1].type == "announced"
    assert spec.session_id == "s-9"

    no_defaults = dict(data, agent_defaults={})
    problems = validate_scenario(no_defaults, agents)
    assert any(p.field == "agent_defaults" and "'company_name'" in p.message for p in problems)
    assert validate_scenario(no_defaults, agents, check_templates=False)[0].level == "warning"


@pytest.mark.parametrize(
    ("target", "ok"),
    [
        ("+15550009999", True),
        ("8:acs:resource_user-1", True),
        ("15550009999", False),  # no +
        ("+0123456", False),
        ("sip:alice@10.0.0.1", False),  # only what ACS transfers to
        (5550009999, False),
        ("+1555" + "0" * 20, False),
    ],
)
def test_a_scenarios_transfer_target_is_a_phone_number_or_an_acs_user(target, ok):
    agents = {"a": _agent("a", "handoff_a", [])}
    data = {"name": "s", "start_agent": "a", "agents": ["a"], "transfer_target": target}
    spec, problems = parse_scenario(data, agents, source="session")
    if ok:
        assert spec is not None and spec.transfer_target == target, problems
    else:
        assert spec is None and [p.field for p in problems if p.is_error] == ["transfer_target"]


# ---------------------------------------------------------------------------------------------
# Rendering


def test_render_prompt_with_defaults_and_memory(shipped):
    banking = shipped.scenarios["banking"]
    source = shipped.agents["concierge"].prompt_template
    with_caller = render_prompt(
        source, prompt_variables(banking, {"caller_name": "Maria Lopez"}, "s1", "concierge")
    )
    assert "Contoso Bank" in with_caller and "Maria Lopez" in with_caller
    anonymous = render_prompt(source, prompt_variables(banking, {}, "s1", "concierge"))
    assert "Contoso Bank" in anonymous and "The caller is probably" not in anonymous


def test_prompt_variables_order_and_promotion():
    scenario = ScenarioSpec(
        "s", "a", ("a",), agent_defaults={"company_name": "Contoso Bank", "institution_name": "Contoso Bank"}
    )
    memory = {"full_name": "Li Wei", "institution_name": "Contoso Private", "email": "li@example.com", "x": 1}
    variables = prompt_variables(scenario, memory, session_id="s-1", agent_name="a")
    assert variables["caller_name"] == "Li Wei"
    assert variables["caller_email"] == "li@example.com"
    assert variables["institution_name"] == "Contoso Private"  # memory wins over agent_defaults
    assert variables["company_name"] == "Contoso Bank"
    assert variables["memory"] == memory and variables["memory"] is not memory
    assert variables["session_id"] == "s-1" and variables["agent_name"] == "a"
    assert "caller_phone" not in variables
    assert prompt_variables(None, None)["memory"] == {}


def test_undefined_renders_empty_not_error():
    source = "A{{ missing }}B{{ memory.nothing.deeper }}C{{ missing.attr['k'] }}D{{ memory.get('x') }}E"
    assert render_prompt(source, {"memory": {}}) == "ABCDE"
    assert render_prompt("{% for x in missing %}{{ x }}{% endfor %}ok", {}) == "ok"
    assert render_prompt("{% if missing %}yes{% else %}no{% endif %}", {}) == "no"


def test_template_variables():
    source = (
        "{{ company_name }} {% set local = 1 %}{{ local }}"
        " {% for t in tools %}{{ t }}{% endfor %}{{ memory.x }}"
    )
    assert template_variables(source) == {"company_name", "tools", "memory"}
    with pytest.raises(jinja2.TemplateSyntaxError):
        template_variables("{% if %}")


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ memory.__class__.__init__.__globals__ }}",
        "{{ cycler.__init__.__globals__.os }}",
        "{{ (1).__class__.__base__.__subclasses__() }}",
        "{{ memory.update({'hacked': 1}) }}",
    ],
)
def test_sandbox_blocks_attribute_tricks(source):
    memory = {"secret": "s3cret"}
    try:
        text = render_prompt(source, {"memory": memory})
    except SecurityError:
        text = ""
    assert "class" not in text and "function" not in text and "module" not in text and "<" not in text
    assert memory == {"secret": "s3cret"}


def test_render_caches_compiled_templates():
    from agents_app.definitions import templates

    templates._compile.cache_clear()
    for _ in range(3):
        assert render_prompt("Hi {{ caller_name }}", {"caller_name": "Bo"}) == "Hi Bo"
    info = templates._compile.cache_info()
    assert info.misses == 1 and info.hits == 2
