"""Prompt templates render within a budget (issue 31, point 1): a template that cannot is refused
when saved, a caller's data that pushes one over it costs one WARNING, and no render runs on the
event loop."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agents_app.catalog import catalog
from agents_app.definitions import check_template, render_prompt
from agents_app.definitions.template_budget import BUDGET, TemplateBudgetExceeded
from agents_app.directory import CatalogDirectory
from voiceagent.conversation.session import SessionState

NESTED_RANGE = "{% for a in range(20000) %}{% for b in range(20000) %}{% endfor %}{% endfor %}x"
STRING_BOMB = "{{ 'x' * 10**9 }}"

TENFOLD = "{{% set s %}}" + "{{{{ s }}}}" * 10 + "{{% endset %}}"  # a block set ten times the last

BOMBS = [
    NESTED_RANGE,
    STRING_BOMB,
    "{{ 'x'|center(10**9) }}",
    "{{ 'x'.ljust(10**9) }}",
    "{{ '%999999999s' % 'x' }}",
    "{{ lipsum(10**9) }}",
    "{{ 7 ** 100000000 }}",
    "{{ (range(10)|list) * 10**8 }}",
    "{% set s = 'xxxxxxxxxx' %}" + "{% set s = s~s~s~s~s~s~s~s~s~s %}" * 6 + "{{ s|length }}",
    "{% set s %}" + "x" * 30 + "{% endset %}" + "".join(TENFOLD.format(i=i) for i in range(6)),
    "{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}",
    "{% for i in range(100000) %}{% endfor %}",
    "{% set s = 'x' * 100000 %}{{ s|replace('x', s) }}",  # squares s
    "{% set s = 'x' * 100000 %}{{ s.replace('x', s) }}",
    "{{ [1]|slice(10**8)|list }}",
    "{{ '{:>999999999}'.format(1) }}",
    "{{ '%.999999999f' % 1 }}",
    "{{ [[1]]|tojson(indent=10**8) }}",
]


@pytest.mark.parametrize("source", BOMBS)
def test_a_template_over_budget_is_refused_when_saved(source):
    problems = check_template(source, file="request")
    assert len(problems) == 1, problems
    assert "budget" in problems[0].message and problems[0].field == "prompt"


@pytest.mark.parametrize("source", BOMBS)
def test_rendering_stops_at_the_budget(source):
    with pytest.raises(TemplateBudgetExceeded):
        render_prompt(source, {"memory": {}})


@pytest.mark.parametrize(
    ("source", "text"),
    [
        ("Hello {{ caller_name }}.", "Hello Ann."),
        ("{% for k, v in memory|dictsort %}{{ k }}={{ v }};{% endfor %}", "a=1;b=2;"),
        ("{% for i in range(3) %}{{ loop.index }}{% endfor %}", "123"),
        ("{{ 'ab' * 3 }} {{ [1, 2]|join(',') }} {{ 'x' ~ caller_name ~ 'y' }}", "ababab 1,2 xAnny"),
        ("{{ '%05d' % 42 }} {{ 'n'|center(5) }}|", "00042   n  |"),
        ("{% macro hi(n) %}hi {{ n }}{% endmacro %}{{ hi(caller_name) }}", "hi Ann"),
        # numbers that are data, not sizes: a balance, a phone number in the text
        ("{{ '%d'|format(1500000) }} {{ '{:,}'.format(1500000) }}", "1500000 1,500,000"),
        (
            "{{ 'Call 18005551234 %s' % caller_name }} {{ 2500000|filesizeformat }}",
            "Call 18005551234 Ann 2.5 MB",
        ),
    ],
)
def test_ordinary_templates_render_as_before(source, text):
    assert render_prompt(source, {"caller_name": "Ann", "memory": {"a": 1, "b": 2}}) == text
    assert check_template(source, file="f") == []


def test_a_callers_data_over_budget_costs_one_warning_not_the_turn(caplog):
    """Saved templates passed the trial render; a huge memory value can still exceed the budget."""
    from agents_app.directory import system_prompt
    from voiceagent.conversation.specs import AgentSpec

    agent = AgentSpec(name="looper", prompt_template="{% for x in memory.rows %}{{ x }}{% endfor %}")
    variables = {"memory": {"rows": list(range(BUDGET.operations + 5))}}
    with caplog.at_level(logging.WARNING):
        assert system_prompt(agent, variables) == agent.prompt_template
    warnings = [r for r in caplog.records if r.name == "agents_app.directory"]
    assert len(warnings) == 1 and "looper" in warnings[0].getMessage()
    assert warnings[0].levelno == logging.WARNING and not warnings[0].exc_info


def test_create_agent_with_a_bomb_is_a_400_naming_the_budget(api_client, loaded):
    for prompt in (NESTED_RANGE, STRING_BOMB):
        body = {"session_id": "bomb-1", "name": "bomber", "prompt": prompt}
        response = api_client.post("/api/v1/agents", body, format="json")
        assert response.status_code == 400, response.json()
        assert "budget" in response.json()["errors"]["prompt"][0], response.json()


@pytest.mark.django_db(transaction=True)
async def test_a_template_is_rendered_off_the_event_loop(loaded):
    """With the catalog in memory (the server's case) the turn's context is resolved on the loop;
    the template itself renders in a worker thread, so other tasks run meanwhile."""
    state = SessionState(session_id="render-off-loop", scenario="default", active_agent="")
    state.agents["looper"] = {"name": "looper", "prompt": "{% for i in range(50) %}.{% endfor %}"}
    state.scenarios["loop"] = {"name": "loop", "start_agent": "looper", "agents": ["looper"]}
    state.scenario = "loop"
    ran: list[int] = []

    async def bystander() -> None:
        ran.append(1)

    catalog.watching = True
    try:
        other = asyncio.ensure_future(bystander())
        ctx = await CatalogDirectory().context(state)
        assert ran, "the render ran on the event loop: nothing else could run meanwhile"
        await other
    finally:
        catalog.watching = False
    assert ctx.system_prompt == "." * 50


def test_recursion_is_bounded_by_the_budget_not_by_pythons_stack():
    """With a raised recursion limit (a library may raise it) a recursive macro crashed the
    interpreter (segfault) before RecursionError; the budget bounds call depth itself."""
    import subprocess
    import sys

    code = (
        "import sys; sys.setrecursionlimit(100000)\n"
        "from agents_app.definitions.templates import render_prompt\n"
        "from agents_app.definitions.template_budget import TemplateBudgetExceeded\n"
        "for source in ('{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}',\n"
        "               '{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}'):\n"
        "    try:\n"
        "        render_prompt(source, {})\n"
        "    except TemplateBudgetExceeded as exc:\n"
        "        print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1000:]
    assert done.stdout.count("nests calls more than 50 deep") == 2, done.stdout
