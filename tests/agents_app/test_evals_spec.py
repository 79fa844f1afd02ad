"""Agent test files: parsing, every problem named at once (file, test, key), the matchers, the
expectations checked on an observation, and the judge (skipped on the offline rules engine)."""

from __future__ import annotations

import pytest

from agents_app.evals.expect import check_expect, parse_expect, parse_matcher
from agents_app.evals.judge import Judge, parse_answer
from agents_app.evals.observe import TurnObservation
from agents_app.evals.spec import SpecError, load_suites, parse_suite
from voiceagent.conversation.testing import ScriptedChat
from voiceagent.llm.rules import RulesChat

GOOD = """
suite: cards
scenario: banking
tests:
  - name: lost card
    seed: 7
    variables: {channel: web}
    greeting: {agent: concierge, reply: {contains: help}}
    turns:
      - say: "I lost my card"
        expect:
          agent: auth_agent
          handoff: {to: auth_agent, type: announced}
          tool_calls:
            - name: verify_client_identity
              args: {full_name: {contains: Ada}, ssn_last4: "1234"}
          no_tool_calls: [block_card]
          reply: {contains: [name, birth]}
          ended: false
          within_ms: 4000
          judge: the agent asked for the caller's full name
      - dtmf: "{{ mfa_code }}#"
      - say: "My name is {{ profile.full_name }}"
        audio: true
        expect: {handoff: none}
  - name: default scenario
    scenario: default
    turns: [{say: hello}]
"""


def problems_of(text: str, file: str = "evals/x.yaml") -> list[str]:
    problems: list[str] = []
    parse_suite(text, file, problems)
    return problems


def test_a_good_file_parses_into_tests():
    problems: list[str] = []
    tests = parse_suite(GOOD, "evals/cards.yaml", problems)
    assert problems == []
    first, second = tests
    assert (first.id, first.scenario, first.seed, first.variables) == (
        "cards::lost card",
        "banking",
        7,
        {"channel": "web"},
    )
    assert first.greeting.agent == "concierge"
    assert [t.turn.say or t.turn.dtmf for t in first.turns] == [
        "I lost my card",
        "{{ mfa_code }}#",
        "My name is {{ profile.full_name }}",
    ]
    assert first.turns[2].turn.audio is True and first.turns[2].expect.handoffs == ()
    expect = first.turns[0].expect
    assert expect.tool_calls[0].name == "verify_client_identity" and expect.no_tool_calls == ("block_card",)
    assert expect.within_ms == 4000 and expect.judge.startswith("the agent asked")
    assert second.scenario == "default" and second.suite == "cards"


def test_every_problem_is_named_at_once_with_file_test_and_key():
    bad = """
scenario: banking
colour: blue
tests:
  - name: one
    sed: 7
    turns:
      - say: hi
        expect: {agentt: x, reply: {startswith: hi}, within_ms: -1}
      - say: hi
        dtmf: "1"
      - dtmf: "12x"
      - say: "{{ profile.full_name"
  - name: one
    turns: [{say: hi, expect: {tool_calls: [{name: t, argz: {}}], handoff: {to: a, type: loud}}}]
"""
    problems = problems_of(bad)
    assert "evals/x.yaml: unknown key 'colour' (known: suite, scenario, tests)" in problems
    assert any(p.startswith("evals/x.yaml: test 'one': unknown key 'sed'") for p in problems)
    assert any("test 'one': turn 1: expect: unknown key 'agentt'" in p for p in problems)
    assert any("turn 1: expect: reply: unknown key 'startswith'" in p for p in problems)
    assert any("within_ms: expected a positive number" in p for p in problems)
    assert any("turn 2: give exactly one of say, dtmf" in p for p in problems)
    assert any("turn 3: dtmf: only 0-9 * # A-D" in p for p in problems)
    assert any("turn 4: template error" in p for p in problems)
    assert any("tool_calls[0]: unknown key 'argz'" in p for p in problems)
    assert any("handoff: type must be announced or discrete" in p for p in problems)
    assert any("the name is used twice" in p for p in problems)
    assert all(p.startswith("evals/x.yaml: ") for p in problems)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("tests: [oops", "not valid YAML at line"),
        ("- a list", "expected a mapping with tests"),
        ("tests: []", "tests: expected a non-empty list"),
        ("tests: [{name: x, turns: [{say: hi}]}]", "no scenario"),
        ("scenario: banking\ntests: [{name: x}]", "nothing to test"),
    ],
)
def test_broken_files_say_why(text, reason):
    assert any(reason in p for p in problems_of(text)), problems_of(text)


def test_load_suites_reads_folders_and_raises_one_error_for_all_files(tmp_path):
    (tmp_path / "a.yaml").write_text("scenario: banking\ntests: [{name: x, turns: [{say: hi}]}]\n")
    (tmp_path / "b.yaml").write_text("tests: [{name: y, turns: [{say: hi}]}]\n")
    (tmp_path / "notes.txt").write_text("not a test file")
    with pytest.raises(SpecError) as raised:
        load_suites([tmp_path, tmp_path / "missing.yaml"])
    assert len(raised.value.problems) == 2
    assert "b.yaml: test 'y': no scenario" in raised.value.problems[0]
    assert "missing.yaml: no such file or folder" in raised.value.problems[1]
    (tmp_path / "b.yaml").unlink()
    [test] = load_suites([tmp_path])
    assert test.id == "a::x"


# --- matchers -----------------------------------------------------------------------------------
def matcher(raw, *, text=False):
    problems: list[str] = []
    m = parse_matcher(raw, "here", problems, text=text)
    assert problems == []
    return m


def test_scalars_equal_strings_case_insensitively_and_numbers_as_numbers():
    assert matcher("Ada Lovelace").check("ada lovelace ")
    assert not matcher("Ada").check("Ada Lovelace")
    assert matcher(1234).check("1234") and matcher(1234).check(1234.0)
    assert matcher("0123").check("0123") and not matcher("0123").check("123")
    assert matcher(True).check(True) and not matcher(True).check(1)
    assert matcher(None).check(None) and not matcher(None).check("")


def test_mapping_operations():
    assert matcher({"contains": "ada"}).check("Ada Lovelace")
    assert matcher({"contains": ["name", "birth"]}, text=True).check("Your name and date of birth?")
    assert not matcher({"contains": ["name", "birth"]}, text=True).check("Your name?")
    assert matcher({"any": ["debit", "credit"]}).check("the Credit card")
    assert matcher({"regex": r"ending in \d"}).check("Ending in 4")
    assert matcher({"not": ["sorry", "error"]}, text=True).check("all good")
    assert not matcher({"not": "sorry"}, text=True).check("Sorry!")
    assert matcher({"digits": "4829"}).check("4 8 2 9") and not matcher({"digits": 4829}).check("48")
    assert matcher({"equals": 3}).check("3.0")
    assert matcher({"contains": "ada", "not": "x"}).check("ada")
    assert matcher("help", text=True).check("How can I HELP you?")  # a plain text = contains


def test_bad_matchers_are_refused():
    problems: list[str] = []
    parse_matcher({"regex": "("}, "f: t: reply", problems, text=True)
    parse_matcher({}, "f: t: reply", problems, text=True)
    parse_matcher(["a"], "f: t: reply", problems, text=True)
    assert "f: t: reply: regex '(' is not valid" in problems[0]
    assert "empty mapping" in problems[1] and "expected a value or a mapping" in problems[2]


def observation() -> TurnObservation:
    return TurnObservation(
        transcript="i lost my card",
        reply="Could you tell me your full name and date of birth?",
        agent="auth_agent",
        tool_calls=[
            {
                "name": "handoff_auth_agent",
                "args": {"reason": "lost card"},
                "result": {"handoff": True},
                "ok": True,
            },
            {
                "name": "verify_client_identity",
                "args": {"full_name": "Ada Lovelace", "ssn_last4": "1234"},
                "result": '{"verified": true}',
                "ok": True,
            },
        ],
        handoffs=[
            {"from": "concierge", "to": "auth_agent", "type": "announced", "tool": "handoff_auth_agent"}
        ],
        first_audio_ms=850.0,
    )


def expect(raw: dict):
    problems: list[str] = []
    parsed = parse_expect(raw, "here", problems)
    assert problems == []
    return parsed


def test_expectations_that_hold():
    ok = expect(
        {
            "agent": "AUTH_AGENT",
            "handoff": {"to": "auth_agent", "type": "announced"},
            "tool_calls": [
                "handoff_auth_agent",
                {
                    "name": "verify_client_identity",
                    "args": {"full_name": {"contains": "{{ name }}"}, "ssn_last4": 1234},
                    "result": {"verified": True},
                },
            ],
            "no_tool_calls": ["block_card"],
            "reply": {"contains": ["name", "birth"]},
            "transcript": "lost",
            "ended": False,
            "within_ms": 1000,
        }
    )
    assert check_expect(ok, observation(), lambda s: s.replace("{{ name }}", "ada")) == []


def test_expectations_that_fail_say_what_was_expected_and_what_happened():
    obs = observation()
    failed = check_expect(
        expect(
            {
                "agent": "fraud_agent",
                "handoff": "none",
                "tool_calls": [{"name": "verify_client_identity", "args": {"ssn_last4": "9999"}}],
                "no_tool_calls": ["handoff_auth_agent"],
                "reply": {"regex": "^goodbye"},
                "ended": True,
                "within_ms": 500,
            }
        ),
        obs,
    )
    by_key = {key: (expected, actual) for key, expected, actual in failed}
    assert by_key["agent"] == ("fraud_agent", "auth_agent")
    assert by_key["handoff"] == ("none", "concierge -> auth_agent (announced)")
    assert by_key["tool_calls[0]"][0] == "verify_client_identity(ssn_last4: equals '9999')"
    assert "verify_client_identity" in by_key["tool_calls[0]"][1]
    assert by_key["no_tool_calls"][0] == "no call of handoff_auth_agent"
    assert by_key["reply"][1].startswith("'Could you tell me")
    assert by_key["ended"] == ("true", "false")
    assert by_key["within_ms"] == ("first audio within 500 ms", "first audio after 850 ms")


def test_tool_calls_must_appear_in_order():
    out_of_order = expect({"tool_calls": ["verify_client_identity", "handoff_auth_agent"]})
    assert [f[0] for f in check_expect(out_of_order, observation())] == ["tool_calls[1]"]


# --- the judge ----------------------------------------------------------------------------------
async def test_the_judge_is_skipped_on_the_offline_rules_engine():
    verdict = await Judge(RulesChat()).ask("the agent was polite", "caller: hi")
    assert verdict.passed is None and "offline-rules" in verdict.detail


async def test_the_judge_asks_yes_or_no_and_parses_strictly():
    chat = ScriptedChat(["Yes.", "no", "Probably yes"])
    judge = Judge(chat)
    assert (await judge.ask("the agent greeted", "concierge: Hello")).passed is True
    assert (await judge.ask("the agent greeted", "concierge: Hello")).passed is False
    unsure = await judge.ask("the agent greeted", "concierge: Hello")
    assert unsure.passed is False and "neither yes nor no" in unsure.detail
    question = chat.requests[0].messages[-1]["content"]
    assert "concierge: Hello" in question and "Statement: the agent greeted" in question
    assert chat.requests[0].tools == []
    assert parse_answer(" YES ").passed is True
