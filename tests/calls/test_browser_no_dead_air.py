"""No dead air through the browser socket (issue 16): a slow tool brings a filler while it runs
(none when it is fast); a silent caller is re-prompted, then told goodbye and the session ends;
the length bound ends a conversation with its line. Cascade on the instant providers and the
banking scenario's agents; settings through the environment variables production reads."""

from __future__ import annotations

import asyncio
import dataclasses
import os

import pytest
from test_browser_consumer import closed_with, connect, is_event, msg, recv, until

from voiceagent import appconfig
from voiceagent.config import load_config
from voiceagent.conversation.session import SessionState
from voiceagent.conversation.testing import ScriptedChat
from voiceagent.conversation.tools import REGISTRY
from voiceagent.conversation.turn_taking import TurnTaking, resolve
from voiceagent.runtime import turn_taking_settings

pytestmark = pytest.mark.django_db(transaction=True)
TOOL = "escalate_to_human"  # offered to the concierge, the banking scenario's entry agent


@pytest.fixture
def tuned(settings):
    """Set turn-taking variables as the environment would."""

    def apply(**values: object) -> None:
        settings.CONFIG = load_config({**os.environ, **{k: str(v) for k, v in values.items()}})
        appconfig.reset_for_tests()

    yield apply
    appconfig.reset_for_tests()


@pytest.fixture
def tool_delay():
    """The concierge's escalation tool, taking as long as the test says."""
    original = REGISTRY.get(TOOL)
    assert original is not None
    delay = {"s": 0.0}

    async def escalate(ctx, reason: str, priority: str = "normal") -> dict:
        await asyncio.sleep(delay["s"])
        return {"queued": True, "estimated_wait_minutes": 2}

    REGISTRY.register(dataclasses.replace(original, func=escalate), replace=True)
    yield delay
    REGISTRY.register(original, replace=True)


async def concierge_settings() -> TurnTaking:
    """The entry agent's turn-taking as a conversation resolves it (its own lines, our globals)."""
    from voiceagent.contributions import contributions

    state = SessionState(session_id="probe", scenario="banking", active_agent="")
    ctx = await contributions.new("agent_directory").context(state)
    return resolve(ctx.agent.turn_taking, turn_taking_settings())


async def start(comm) -> list[dict]:
    await recv(comm)
    await comm.send_to(text_data=msg("config", scenario="banking", sample_rate=16000))
    await comm.send_to(text_data=msg("control", action="start"))
    return await until(comm, lambda m: m["type"] == "response" and m["payload"]["final"])


def final_texts(seen: list[dict]) -> list[str]:
    return [m["payload"]["text"] for m in seen if m["type"] == "response" and m["payload"]["final"]]


def script_escalation(fake_runtime) -> None:
    """The model's rounds: the escalation tool, then its answer (a conversation takes the chat
    provider when it starts)."""
    fake_runtime.chat = ScriptedChat([[(TOOL, {"reason": "wants a person"})], "You are in the queue."])


async def ask_escalation(comm) -> list[dict]:
    await until(comm, lambda m: m["type"] == "event" and m["payload"].get("state") == "listening")
    await comm.send_to(text_data=msg("text", text="a person please"))
    return await until(
        comm, lambda m: m["type"] == "response" and m["payload"]["text"] == "You are in the queue.", timeout=8
    )


async def test_slow_tool_brings_a_filler_while_it_runs(fake_runtime, tuned, tool_delay):
    tuned(FILLER_AFTER_MS=100, REPROMPT_AFTER_S=0)
    tool_delay["s"] = 1.0
    fillers = (await concierge_settings()).fillers
    script_escalation(fake_runtime)
    comm = await connect()
    await start(comm)
    seen = await ask_escalation(comm)
    tool_at = next(i for i, m in enumerate(seen) if is_event("tool_call")(m))
    said_while_running = final_texts(seen[:tool_at])
    assert said_while_running and said_while_running[0] == fillers[0]
    assert set(said_while_running) <= set(fillers)
    assert not set(final_texts(seen[tool_at:])) & set(fillers)  # nothing once it answered
    await comm.disconnect()


async def test_fast_tool_brings_no_filler(fake_runtime, tuned, tool_delay):
    tuned(FILLER_AFTER_MS=1500, REPROMPT_AFTER_S=0)
    fillers = (await concierge_settings()).fillers
    script_escalation(fake_runtime)
    comm = await connect()
    await start(comm)
    seen = await ask_escalation(comm)
    assert any(is_event("tool_call")(m) for m in seen)
    assert not set(final_texts(seen)) & set(fillers)
    await comm.disconnect()


async def test_silent_caller_is_reprompted_then_the_agent_says_goodbye_and_the_session_ends(
    fake_runtime, tuned
):
    tuned(REPROMPT_AFTER_S=0.3, MAX_REPROMPTS=2, FILLER_AFTER_MS=0)
    settings = await concierge_settings()
    comm = await connect()
    greeting = final_texts(await start(comm))
    seen = await until(comm, is_event("session_ended"), timeout=10)
    assert final_texts(seen) == [settings.reprompt, settings.reprompt, settings.goodbye]
    assert greeting and greeting[0] not in (settings.reprompt, settings.goodbye)
    assert (await closed_with(comm))["code"] == 1000


async def test_a_caller_who_answers_is_not_told_goodbye(fake_runtime, tuned):
    tuned(REPROMPT_AFTER_S=0.3, MAX_REPROMPTS=1, FILLER_AFTER_MS=0)
    settings = await concierge_settings()
    comm = await connect()
    await start(comm)
    await until(comm, lambda m: m["type"] == "response" and m["payload"]["text"] == settings.reprompt)
    await comm.send_to(text_data=msg("text", text="yes, still here"))
    seen = await until(comm, is_event("session_ended"), timeout=10)
    texts = final_texts(seen)
    answer = texts.index("Sure, I can help with that.")
    assert texts[answer + 1 :] == [settings.reprompt, settings.goodbye]  # counted again from the answer
    assert (await closed_with(comm))["code"] == 1000


async def test_time_limit_ends_the_conversation_with_its_line(fake_runtime, tuned):
    tuned(MAX_CONVERSATION_S=1, REPROMPT_AFTER_S=0, FILLER_AFTER_MS=0)
    settings = await concierge_settings()
    fake_runtime.chat = ScriptedChat(default=" ".join(["and"] * 200))  # still talking at the limit
    comm = await connect()
    await start(comm)
    await comm.send_to(text_data=msg("text", text="tell me a long story"))
    seen = await until(comm, is_event("session_ended"), timeout=10)
    assert final_texts(seen)[-1] == settings.time_limit_line
    story = next(
        i for i, m in enumerate(seen) if m["type"] == "response" and m["payload"]["text"].startswith("and")
    )
    assert any(is_event("barge_in")(m) for m in seen[story:])  # the story was stopped for the line
    assert (await closed_with(comm))["code"] == 1000


async def test_live_mode_reprompts_a_silent_caller_and_ends_the_session(fake_runtime, live_runtime, tuned):
    tuned(REPROMPT_AFTER_S=0.3, MAX_REPROMPTS=1, FILLER_AFTER_MS=0)
    settings = await concierge_settings()
    comm = await connect()
    await recv(comm)
    await comm.send_to(text_data=msg("config", scenario="banking", mode="live"))
    await comm.send_to(text_data=msg("control", action="start"))
    seen = await until(comm, is_event("session_ended"), timeout=10)
    assert final_texts(seen)[-2:] == [settings.reprompt, settings.goodbye]  # said by the realtime peer
    assert (await closed_with(comm))["code"] == 1000


async def test_live_mode_time_limit_ends_the_session_with_its_line(fake_runtime, live_runtime, tuned):
    tuned(MAX_CONVERSATION_S=1, REPROMPT_AFTER_S=0, FILLER_AFTER_MS=0)
    settings = await concierge_settings()
    comm = await connect()
    await recv(comm)
    await comm.send_to(text_data=msg("config", scenario="banking", mode="live"))
    await comm.send_to(text_data=msg("control", action="start"))
    seen = await until(comm, is_event("session_ended"), timeout=10)
    assert final_texts(seen)[-1] == settings.time_limit_line
    assert (await closed_with(comm))["code"] == 1000
