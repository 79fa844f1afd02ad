"""The steps both pipelines take the same way on data: session opening, tool rounds, handoffs.

Both engines (:mod:`voiceagent.conversation.engine` and :mod:`voiceagent.conversation.live`) run
tool calls through the same registry and switch agents the same way; only where the results go
differs (chat messages for the cascade LLM, ``function_call_output`` items for the realtime API).
:func:`run_tool_round` is that shared step; the engine passes a ``reply`` callback that delivers
each call's output to its model. What they share as a running conversation is
:class:`~voiceagent.conversation.core.ConversationCore`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from voiceagent.conversation.context import AgentDirectory, TurnContext
from voiceagent.conversation.events import Event, Handoff, ToolCall
from voiceagent.conversation.providers import ToolCallRequest
from voiceagent.conversation.session import HandoffEvent, SessionState, SessionStore, Turn
from voiceagent.conversation.specs import HandoffSpec
from voiceagent.conversation.timing import TurnClock
from voiceagent.conversation.tools import ToolContext, execute_spec, resolve_handoff

logger = logging.getLogger("voiceagent.conversation")


async def persist(call: Awaitable[Any], what: str, session_id: str) -> None:
    """Await a store write that the conversation does not depend on; a failure is logged and the
    turn goes on. A store should ride out its own outages (the Django store keeps and retries
    writes); this is the engine's backstop, so that persistence never ends a conversation or loses
    the turn in memory (issue 12: a cache outage raised out of ``save`` and killed the response)."""
    try:
        await call
    except Exception as exc:
        kind = type(exc).__name__
        logger.warning("session %s: %s failed, the conversation goes on: %s: %s", session_id, what, kind, exc)


class ToolHost(Protocol):
    """The parts of a conversation a tool round needs."""

    session_id: str
    state: SessionState | None
    store: SessionStore
    directory: AgentDirectory
    clock: TurnClock

    async def emit(self, event: Event) -> None: ...

    async def add_turn(self, turn: Turn) -> None: ...


@dataclass
class HandoffOutcome:
    """A tool round switched the active agent (already recorded and announced as an event)."""

    spec: HandoffSpec
    call: ToolCallRequest
    returning: bool  # back to an agent the caller was handed away from (or the scenario's entry agent)
    context: TurnContext  # the new agent's context

    @property
    def announced(self) -> bool:
        return self.spec.type == "announced"

    @property
    def line(self) -> str:
        """What an announced handoff's target says: its return greeting when the caller comes back."""
        agent = self.context.agent
        return agent.return_greeting if self.returning and agent.return_greeting else agent.greeting


async def open_session(
    store: SessionStore,
    directory: AgentDirectory,
    session_id: str,
    *,
    scenario: str,
    transport: str | None,
    agent: str | None,
    history_turns: int,
) -> tuple[SessionState, list[Turn], TurnContext]:
    """Load (or create) the session state and its recent history; resolve and save the active agent."""
    history: list[Turn] = []
    state = await store.load(session_id)
    if state is None:
        state = SessionState(session_id=session_id, scenario=scenario, active_agent="", transport=transport)
    else:
        history = await store.history(session_id, history_turns)
    if transport:
        state.transport = transport
    if state.scenario != scenario:
        state.scenario, state.active_agent = scenario, ""
    ctx = await directory.context(state, agent or state.active_agent or None)
    state.active_agent = ctx.agent.name
    await persist(store.save(state), "saving the session state", session_id)
    return state, history, ctx


def history_lines(turns: list[Turn]) -> Iterator[tuple[str, str]]:
    """The history as (role, text) lines for a model: what was said, and tool results as notes."""
    for turn in turns:
        if turn.role in ("user", "assistant"):
            yield turn.role, turn.content
        elif turn.role == "tool":
            yield "system", f"Earlier, tool {turn.tool_name} returned: {turn.content}"


def error_content(kind: str, message: str) -> str:
    """A tool call's output when it was not run (or not to the end): an error the model can read."""
    return json.dumps({"error": {"type": kind, "message": message}})


async def run_tool_round(
    host: ToolHost,
    ctx: TurnContext,
    calls: list[ToolCallRequest],
    reply: Callable[[ToolCallRequest, str], None],
) -> HandoffOutcome | None:
    """Execute one model round's tool calls, handoffs last; every call gets exactly one ``reply``.

    Ordinary calls run in order through the registry (a tool not offered to the agent is refused,
    never run), each with a ``ToolCall`` event and a ``tool`` history turn. Of the handoff calls the
    first is performed (the others are answered "one handoff at a time"): the state's active agent
    switches, the handoff is recorded in the store and a ``Handoff`` event emitted. Returns the
    outcome of that handoff, or ``None`` when the agent stays.
    """
    assert host.state is not None
    state = host.state
    handoffs = [c for c in calls if ctx.handoff_map.is_handoff_tool(c.name)]
    tool_ctx = ToolContext(
        session_id=host.session_id, agent=ctx.agent.name, scenario=ctx.scenario.name, memory=state.memory
    )
    by_name = {t.name: t for t in ctx.tools}
    for call in calls:
        if call in handoffs:
            continue
        spec = by_name.get(call.name)
        if spec is None:  # not offered to this agent (or removed since): refuse, never run it
            value: Any = {
                "error": {
                    "type": "unknown_tool",
                    "message": f"tool {call.name!r} is not available to this agent",
                }
            }
            ok, duration, content = False, 0.0, json.dumps(value)
        else:
            outcome = await execute_spec(spec, call.arguments, tool_ctx)
            ok, value, duration, content = (
                outcome.ok,
                outcome.result if outcome.ok else {"error": outcome.error},
                outcome.duration_ms,
                outcome.to_model_content(),
            )
        reply(call, content)
        await record_tool(host, ctx.agent.name, call, value, ok, duration, content)
    if not handoffs:
        return None
    call = handoffs[0]
    began = asyncio.get_running_loop().time()
    for extra in handoffs[1:]:  # one handoff per round; tell the model about the others
        reply(extra, error_content("ignored", "one handoff at a time"))
    try:
        args = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        args = {}
    handoff = resolve_handoff(
        ctx.handoff_map, ctx.agent.name, call.name, args if isinstance(args, dict) else {}
    )
    if handoff is None:
        content = error_content(
            "invalid_handoff", f"{call.name} does not lead to another agent of this scenario"
        )
        reply(call, content)
        await record_tool(host, ctx.agent.name, call, json.loads(content), False, 0.0, content)
        return None
    result = {"handoff": True, "from": handoff.from_agent, "to": handoff.to_agent, "type": handoff.type}
    content = json.dumps(result)
    reply(call, content)
    await record_tool(host, ctx.agent.name, call, result, True, 0.0, content)
    returning = any(h.get("from") == handoff.to_agent for h in state.handoffs) or (
        handoff.to_agent == ctx.scenario.start_agent
    )
    state.active_agent = handoff.to_agent
    event = HandoffEvent(handoff.from_agent, handoff.to_agent, handoff.type)
    await persist(host.store.record_handoff(state, event), "recording the handoff", host.session_id)
    await host.emit(
        Handoff(
            host.session_id,
            from_agent=handoff.from_agent,
            to_agent=handoff.to_agent,
            type=handoff.type,
            tool=call.name,
        )
    )
    new_ctx = await host.directory.context(state)
    timing, now = host.clock.current(), asyncio.get_running_loop().time()
    timing.handoff_ms = round((now - began) * 1000.0, 3)
    timing.mark("handoff_end", now)  # where traces place the handoff
    return HandoffOutcome(spec=handoff, call=call, returning=returning, context=new_ctx)


async def record_tool(
    host: ToolHost, agent: str, call: ToolCallRequest, value: Any, ok: bool, duration: float, content: str
) -> None:
    """A ``ToolCall`` event, a ``tool`` history turn and the turn's tool timing for one executed
    (or refused) call."""
    host.clock.current().tool(call.name, duration, at=asyncio.get_running_loop().time())
    try:
        args = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        args = {"_raw": call.arguments}
    await host.emit(
        ToolCall(
            host.session_id,
            name=call.name,
            arguments=args if isinstance(args, dict) else {},
            result=value,
            ok=ok,
            duration_ms=round(duration, 2),
            agent=agent,
        )
    )
    await host.add_turn(Turn(role="tool", content=content, agent=agent, tool_name=call.name))
