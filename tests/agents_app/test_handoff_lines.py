"""No two agents of a shipped scenario say the same sentence back to back: what the offline dialog
has an agent say as it hands over (announced) against the line its target opens with (greeting,
return greeting). The banking concierge and auth agent both opened with "I can help with that."
(issue 30); the engine also leaves such a sentence out (tests/voiceagent/conversation)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SCENARIOS = sorted(p.stem for p in (FIXTURES / "scenarios").glob("*.yaml"))


def sentences(template: str) -> set[str]:
    """The template's sentences as a caller hears them, without its Jinja parts."""
    text = re.sub(r"\{\{.*?\}\}|\{%.*?%\}", " ", template)
    found = (" ".join(re.findall(r"[a-z0-9]+", s.lower())) for s in re.split(r"(?<=[.!?])\s+", text))
    return {s for s in found if s}


def tools_of(rule: dict) -> list[str]:
    tool = rule.get("tool")
    calls = tool if isinstance(tool, list) else [tool] if tool else []
    return [c if isinstance(c, str) else c.get("name", "") for c in calls]


def rules_of(section: dict) -> list[dict]:
    """An agent's rules and after-tool rules of the dialog file."""
    rules = list(section.get("rules") or [])
    for value in (section.get("after_tool") or {}).values():
        rules += value if isinstance(value, list) else [value]
    return rules


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_an_agent_handing_over_and_its_target_never_say_the_same_sentence(scenario):
    spec = yaml.safe_load((FIXTURES / "scenarios" / f"{scenario}.yaml").read_text())
    dialog_file = FIXTURES / "dialog" / f"{scenario}.yaml"
    dialog = yaml.safe_load(dialog_file.read_text()) if dialog_file.exists() else {}
    agents = {
        name: yaml.safe_load((FIXTURES / "agents" / name / "agent.yaml").read_text())
        for name in spec["agents"]
    }
    checked, repeats = 0, []
    for edge in spec.get("handoffs") or []:
        if edge.get("type", "announced") != "announced":
            continue
        target = agents[edge["to"]]
        opening = sentences(target.get("greeting") or "") | sentences(target.get("return_greeting") or "")
        for rule in rules_of((dialog.get("agents") or {}).get(edge["from"]) or {}):
            if edge["tool"] in tools_of(rule):
                checked += 1
                repeats += [
                    (edge["from"], edge["to"], s) for s in sentences(rule.get("reply") or "") & opening
                ]
    assert not repeats, f"said back to back by two agents: {repeats}"
    if dialog:
        assert checked, "no handoff line of the dialog was checked"
