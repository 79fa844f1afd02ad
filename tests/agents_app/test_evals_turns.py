"""``test_agents`` prints each turn as it ends (over a transport by default, over the engine with
``--turns``), before the test's result line: a slow run shows where it is."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from voiceagent.llm.rules import RulesChat

pytestmark = pytest.mark.django_db(transaction=True)

SUITE = """
suite: turns
scenario: banking
tests:
  - name: lost card
    turns:
      - say: "i lost my card"
        expect: {agent: auth_agent}
"""


@pytest.fixture
def rules_runtime(fake_runtime):
    fake_runtime.chat = RulesChat()
    return fake_runtime


def run(tmp_path, *args: str) -> str:
    path = tmp_path / "turns.yaml"
    path.write_text(SUITE)
    out = io.StringIO()
    call_command("test_agents", str(path), *args, stdout=out)
    return out.getvalue()


def test_each_turn_is_printed_as_it_ends(rules_runtime, tmp_path):
    lines = run(tmp_path, "--turns").splitlines()
    greeting = next(
        i for i, line in enumerate(lines) if line.startswith("  turns::lost card greeting: concierge: ")
    )
    turn = next(
        i
        for i, line in enumerate(lines)
        if line.startswith("  turns::lost card turn 1: caller 'i lost my card' -> auth_agent: ")
    )
    result = next(i for i, line in enumerate(lines) if "PASS" in line and "turns::lost card" in line)
    assert greeting < turn < result  # as it goes, before the test's verdict
    assert "tool handoff_auth_agent, handoff concierge -> auth_agent (announced)" in lines[turn]


def test_the_engine_run_stays_a_table_by_default(rules_runtime, tmp_path):
    assert " turn 1: " not in run(tmp_path)
