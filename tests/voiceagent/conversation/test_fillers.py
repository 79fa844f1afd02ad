"""Fillers while tools run (issue 16, no dead air): the timing rule of ``say_fillers`` on a fake
playback clock, then the cascade engine with a slow and a fast tool (the filler is a spoken line
of the response, in the history as heard). No timing thresholds: order and presence only."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from enginekit import Harness

from voiceagent.conversation.common import say_fillers
from voiceagent.conversation.specs import AgentSpec
from voiceagent.conversation.turn_taking import TurnTaking

AGENT = AgentSpec(name="a", prompt_template="")
SLACK = 0.01  # the loop may wake a timer a clock tick early


@dataclass
class PlaybackHost:
    """A playback clock: each said line plays for ``line_s`` after what is queued already."""

    line_s: float = 0.15
    session_id: str = "s"
    playback_end: float = 0.0
    said: list[tuple[str, float, float]] = field(default_factory=list)  # (line, said at, played by)

    async def say(self, line: str, agent: AgentSpec) -> None:
        now = asyncio.get_running_loop().time()
        self.playback_end = max(now, self.playback_end) + self.line_s
        self.said.append((line, now, self.playback_end))


async def run_for(host: PlaybackHost, settings: TurnTaking, seconds: float) -> None:
    task = asyncio.create_task(say_fillers(host, AGENT, settings, host.say))
    await asyncio.sleep(seconds)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_fillers_cycle_each_after_the_previous_has_played_plus_the_wait():
    host = PlaybackHost()
    begun = asyncio.get_running_loop().time()
    await run_for(host, TurnTaking(filler_after_ms=50, fillers=("one", "two")), 0.9)
    lines = [line for line, _, _ in host.said]
    assert lines[:3] == ["one", "two", "one"]
    assert host.said[0][1] >= begun + 0.05 - SLACK
    for (_, _, played), (_, said, _) in zip(host.said, host.said[1:], strict=False):
        assert said >= played + 0.05 - SLACK  # never over the previous one, never back to back


async def test_first_filler_waits_for_the_agents_own_audio_to_play_out():
    host = PlaybackHost()
    host.playback_end = asyncio.get_running_loop().time() + 0.2  # "let me check that" still playing
    before = host.playback_end
    await run_for(host, TurnTaking(filler_after_ms=50, fillers=("one",)), 0.4)
    assert host.said and host.said[0][1] >= before + 0.05 - SLACK


async def test_no_filler_when_disabled_or_when_there_are_none():
    for settings in (TurnTaking(filler_after_ms=0), TurnTaking(filler_after_ms=20, fillers=())):
        host = PlaybackHost()
        await run_for(host, settings, 0.15)
        assert host.said == []


async def test_cancelled_before_the_wait_says_nothing():
    host = PlaybackHost()
    await run_for(host, TurnTaking(filler_after_ms=200), 0.05)
    assert host.said == []


# --- the cascade engine -----------------------------------------------------------------------------
def slow_harness(delay_s: float, filler_after_ms: int = 60) -> Harness:
    settings = TurnTaking(filler_after_ms=filler_after_ms, fillers=("Hold on.", "Still looking."))
    h = Harness(script=[[("lookup", {"account": "7"})], "Balance is fine."], turn_taking=lambda: settings)

    @h.registry.tool(name="lookup", replace=True)
    async def lookup(account: str) -> dict:
        """Look up an account.

        Args:
            account: the account number
        """
        await asyncio.sleep(delay_s)
        return {"account": account}

    return h


def finals(h: Harness) -> list[str]:
    return [e.text for e in h.of("AgentResponse") if e.final]


async def test_slow_tool_gets_a_filler_spoken_in_the_response_and_heard_in_the_history():
    async with slow_harness(0.6) as h:
        await h.idle()
        await h.conv.push_text("what is my balance")
        await h.until(lambda h: "Balance is fine." in finals(h))
        await h.idle()
        kinds = h.kinds()
        filler_at = kinds.index("AgentResponse(front:Hold on.)")
        tool_at = kinds.index("ToolCall(lookup:ok)")
        assert filler_at < tool_at < kinds.index("AgentResponse(front:Balance is fine.)")
        assert "Hold on." in h.tts.spoken  # said, not only shown
        said = [t.content for t in h.conv.history if t.role == "assistant"][-1]
        assert said.startswith("Hold on.") and said.endswith("Balance is fine.")


async def test_fast_tool_gets_no_filler():
    async with slow_harness(0.0, filler_after_ms=300) as h:
        await h.idle()
        await h.conv.push_text("what is my balance")
        await h.until(lambda h: "Balance is fine." in finals(h))
        await h.idle()
        await asyncio.sleep(0.4)  # past filler_after_ms: nothing comes late either
        assert not {"Hold on.", "Still looking."} & set(finals(h))
        assert "Hold on." not in h.tts.spoken


async def test_no_filler_after_the_tool_answered():
    async with slow_harness(0.15, filler_after_ms=100) as h:
        await h.idle()
        await h.conv.push_text("what is my balance")
        await h.until(lambda h: "Balance is fine." in finals(h))
        await h.idle()
        await asyncio.sleep(0.3)
        kinds = h.kinds()
        tool_at = kinds.index("ToolCall(lookup:ok)")
        assert not [k for k in kinds[tool_at:] if "Hold on." in k or "Still looking." in k]
