"""``manage.py test_agents`` over the in-process engine: the banking scenario on the offline dialog
(``offline-rules``) and the built-in tools, a seeded demo caller, typed turns and keypad digits."""

from __future__ import annotations

import json
import logging
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from voiceagent.llm.rules import RulesChat

pytestmark = pytest.mark.django_db(transaction=True)

PASSING = """
suite: keypad
scenario: banking
tests:
  - name: a lost card is handed to verification
    seed: 7
    greeting:
      agent: concierge
    turns:
      - say: "i lost my card"
        expect:
          agent: auth_agent
          handoff: {to: auth_agent, type: announced}
          tool_calls: [{name: handoff_auth_agent}]
          no_tool_calls: [block_card]
          reply: {contains: "full name"}
          ended: false
      - say: "yes thats me"
        expect:
          tool_calls:
            - name: send_mfa_code
              result: {sent: true}
          reply: {contains: keypad}
      - dtmf: "{{ mfa_code }}#"
        expect:
          transcript: "Keypad entry: {{ mfa_code }}"
          tool_calls:
            - {name: verify_mfa_code, result: {verified: true}}
          handoff: {from: auth_agent, to: cards_agent, type: discrete}
          agent: cards_agent
"""

FAILING = """
scenario: banking
tests:
  - name: expects the wrong agent
    turns:
      - say: "i lost my card"
        expect:
          agent: fraud_agent
          reply: {contains: "zebra"}
"""


@pytest.fixture
def rules_runtime(fake_runtime):
    fake_runtime.chat = RulesChat()
    return fake_runtime


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_passing_file_exits_0_and_writes_junit_and_json(rules_runtime, tmp_path, capsys):
    path = write(tmp_path, "keypad.yaml", PASSING)
    junit, report = tmp_path / "out" / "junit.xml", tmp_path / "out" / "report.json"
    call_command("test_agents", str(path), "--junit", str(junit), "--json", str(report))
    out = capsys.readouterr().out
    assert "[1/1] PASS" in out and "keypad::a lost card is handed to verification" in out
    assert "1 passed, 0 failed, 0 errors, 0 skipped" in out
    suite = ET.parse(junit).getroot()
    assert suite.tag == "testsuites" and suite.get("tests") == "1" and suite.get("failures") == "0"
    case = suite.find("testsuite/testcase")
    assert case.get("name") == "a lost card is handed to verification" and case.find("failure") is None
    data = json.loads(report.read_text())
    assert data["ok"] is True and data["summary"]["passed"] == 1
    test = data["tests"][0]
    assert test["status"] == "passed" and len(test["turns"]) == 4
    assert test["turns"][3]["agent"] == "cards_agent"


def test_the_quiet_table_leaves_the_process_log_levels_as_they_were(rules_runtime, tmp_path, capsys):
    """The command quiets the engine's loggers for its table; run in-process (call_command), it
    must put their levels back, or every later INFO line of the process is lost."""
    path = write(tmp_path, "keypad.yaml", PASSING)
    names = ("voiceagent", "agents_app", "mcp_app", "calls", "bridge")
    before = {name: logging.getLogger(name).level for name in names}
    call_command("test_agents", str(path))
    assert "1 passed" in capsys.readouterr().out
    assert {name: logging.getLogger(name).level for name in names} == before
    assert logging.getLogger("calls.media").isEnabledFor(logging.INFO)


def test_a_failing_test_exits_1_with_the_expectation_and_the_transcript(rules_runtime, tmp_path, capsys):
    path = write(tmp_path, "failing.yaml", FAILING)
    junit = tmp_path / "junit.xml"
    with pytest.raises(CommandError) as raised:
        call_command("test_agents", str(path), "--junit", str(junit))
    assert raised.value.returncode == 1
    out = capsys.readouterr().out
    assert "[1/1] FAIL" in out
    assert "turn 1" in out and "agent: expected fraud_agent, got auth_agent" in out
    assert "caller: i lost my card" in out  # the failing turn's transcript
    assert "[handoff concierge -> auth_agent (announced)]" in out
    case = ET.parse(junit).getroot().find("testsuite/testcase")
    failure = case.find("failure")
    assert failure is not None and "fraud_agent" in failure.get("message")
    assert "caller: i lost my card" in failure.text


def test_a_bad_file_exits_2_with_every_problem_and_one_line_why(tmp_path, capsys):
    path = write(
        tmp_path,
        "bad.yaml",
        "scenario: banking\ntests:\n  - name: x\n    turns: [{say: hi, expect: {agnt: a}}]\n",
    )
    with pytest.raises(CommandError) as raised:
        call_command("test_agents", str(path))
    assert raised.value.returncode == 2
    assert str(raised.value) == "1 problem(s) in the test files"
    assert "test 'x': turn 1: expect: unknown key 'agnt'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--transport", "browser"], "--transport browser needs --url"),
        (["-k", "nothing-like-this"], "no test matches -k 'nothing-like-this'"),
        (["--concurrency", "0"], "--concurrency must be 1 or more"),
    ],
)
def test_bad_options_exit_2(tmp_path, argv, reason):
    path = write(tmp_path, "ok.yaml", "scenario: banking\ntests: [{name: x, turns: [{say: hi}]}]\n")
    with pytest.raises(CommandError) as raised:
        call_command("test_agents", str(path), *argv)
    assert raised.value.returncode == 2 and str(raised.value).startswith(reason)


def test_an_unknown_scenario_exits_2(rules_runtime, tmp_path, capsys):
    path = write(tmp_path, "typo.yaml", "scenario: bankin\ntests: [{name: x, turns: [{say: hi}]}]\n")
    with pytest.raises(CommandError) as raised:
        call_command("test_agents", str(path))
    assert raised.value.returncode == 2 and "unknown scenario" in str(raised.value)
    assert "typo.yaml: test 'x': unknown scenario 'bankin'" in capsys.readouterr().err


ERRORS_AND_JUDGES = """
scenario: banking
tests:
  - name: uses a profile without a seed
    turns: [{say: "my name is {{ profile.full_name }}"}]
  - name: judged
    turns:
      - say: "i lost my card"
        expect: {agent: auth_agent, judge: "the agent asked for the caller's name"}
"""


def test_a_broken_turn_is_an_error_with_its_reason_and_a_judge_offline_is_skipped(
    rules_runtime, tmp_path, capsys
):
    path = write(tmp_path, "mixed.yaml", ERRORS_AND_JUDGES)
    report = tmp_path / "r.json"
    with pytest.raises(CommandError) as raised:
        call_command("test_agents", str(path), "--json", str(report), "-k", "MIXED::")
    assert raised.value.returncode == 1
    out = capsys.readouterr().out
    assert "ERROR mixed::uses a profile without a seed" in out
    assert "error: turn 1: template error: 'profile' is undefined" in out and "Traceback" not in out
    assert (
        "PASS  mixed::judged" in out and "judge skipped (the chat provider is the offline rules engine" in out
    )
    assert "0 failed, 1 errors" in out and "1 judgement(s) skipped" in out
    data = json.loads(report.read_text())
    assert [t["status"] for t in data["tests"]] == ["error", "passed"]
    assert data["ok"] is False and data["summary"]["errors"] == 1


SPOKEN = """
scenario: banking
tests:
  - name: a spoken request
    turns:
      - say: "i lost my card"
        audio: true
        expect: {transcript: "lost my card", agent: auth_agent, within_ms: 30000}
"""


def test_a_spoken_turn_goes_through_the_microphone_path(rules_runtime, tmp_path, capsys):
    """espeak-ng speech at 16 kHz, pushed in real time through push_audio; the VAD ends the turn
    (the scripted STT of the fixture hears 'i lost my card')."""
    call_command("test_agents", str(write(tmp_path, "spoken.yaml", SPOKEN)))
    assert "[1/1] PASS" in capsys.readouterr().out
