"""An announced handoff's line never repeats, back to back, a sentence the agent handing over has
just said in the same response (the concierge's "I can help with that." and the auth agent's
greeting opening with it, issue 30): over the engine with the offline dialog provider."""

from __future__ import annotations

import asyncio
import dataclasses

from enginekit import AGENTS, SCENARIO, Harness

from voiceagent.conversation.testing import StaticDirectory
from voiceagent.llm.rules import RulesChat

DIALOG = """\
version: 1
agents:
  front:
    rules:
      - match: 'billing'
        reply: "I can help with that. I'm connecting you to billing."
        tool: {name: to_billing, args: {reason: invoice}}
    fallback: "Sorry?"
"""


async def test_the_new_agent_leaves_out_what_the_agent_handing_over_just_said(tmp_path):
    (tmp_path / "desk.yaml").write_text(DIALOG)
    agents = [
        dataclasses.replace(a, greeting="I can help with that! What is the invoice number?")
        if a.name == "billing"
        else a
        for a in AGENTS
    ]
    async with Harness(texts=["i have a billing question"]) as h:
        h.conv.chat = RulesChat(dialog_dir=tmp_path)
        h.conv.directory = StaticDirectory(agents, SCENARIO, h.registry)
        await h.idle()
        h.speak(speech_frames=10)
        await asyncio.sleep(0.01)
        await h.idle()
    said = [(e.agent, e.text) for e in h.of("AgentResponse") if e.final][1:]  # after the greeting
    assert said == [
        ("front", "I can help with that. I'm connecting you to billing."),
        ("billing", "What is the invoice number?"),
    ]
