"""Whether a conversation is recorded (its scenario's ``recording`` when set, else
RECORDING_ENABLED), and the scenario's announcement said before the greeting when it is."""

from __future__ import annotations

import dataclasses

import pytest
from enginekit import AGENTS, SCENARIO, Harness

from voiceagent.conversation.testing import StaticDirectory

CONSENT = "This call is recorded for quality."


async def opening(enabled: bool, **scenario) -> tuple[bool, str]:
    h = Harness(recording=lambda: enabled)
    h.conv.directory = StaticDirectory(AGENTS, dataclasses.replace(SCENARIO, **scenario), h.registry)
    async with h:
        await h.until(lambda h: any(e.kind == "AgentResponse" and e.final for e in h.events))
        said = next(e.text for e in h.events if e.kind == "AgentResponse" and e.final)
        return h.conv.recording, said


@pytest.mark.parametrize(
    ("enabled", "scenario", "recorded", "said"),
    [
        (True, {"recording_announcement": CONSENT}, True, f"{CONSENT} Hello, front desk."),
        (False, {"recording_announcement": CONSENT}, False, "Hello, front desk."),
        (
            False,
            {"recording": True, "recording_announcement": CONSENT},
            True,
            f"{CONSENT} Hello, front desk.",
        ),
        (True, {}, True, "Hello, front desk."),
        (False, {"recording": False}, False, "Hello, front desk."),
        (True, {"recording": False, "recording_announcement": CONSENT}, False, "Hello, front desk."),
    ],
)
async def test_recorded_and_announced(enabled, scenario, recorded, said):
    assert await opening(enabled, **scenario) == (recorded, said)
