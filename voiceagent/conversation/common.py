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
import itertools
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from voiceagent.conversation.context import AgentDirectory, TurnContext
from voiceagent.conversation.events import Event, Handoff, ToolCall
from voiceagent.conversation.providers import ChatRequest, ToolCallRequest
from voiceagent.conversation.session import PERSON, HandoffEvent, SessionState, SessionStore, Turn
from voiceagent.conversation.specs import AgentSpec, HandoffSpec
from voiceagent.conversation.timing import TurnClock
from voiceagent.conversation.tools import ToolContext, execute_spec, resolve_handoff
from voiceagent.conversation.turn_taking import TurnTaking

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
    playback_end: float  # loop time when the agent audio queued so far has played

    async def emit(self, event: Event) -> None: ...

    async def add_turn(self, turn: Turn) -> None: ...

    def turn_taking_for(self, agent: AgentSpec | None) -> TurnTaking: ...


SayFiller = Callable[[str, AgentSpec], Awaitable[None]]
"""How a pipeline says a filler line while tools run: into the current response, as a spoken
line of the agent (an ``AgentResponse`` and its audio; in the history as heard)."""


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

    def line_after(self, said: str) -> str:
        """:attr:`line` without the sentences the caller has just heard in ``said`` (this response,
        the agent handing over): two agents never say the same sentence back to back ("I can help
        with that." from the concierge, then from the auth agent's greeting)."""
        heard = {_sentence_key(s) for s in _SENTENCE_END.split(said)}
        kept = [s for s in _SENTENCE_END.split(self.line.strip()) if _sentence_key(s) not in heard]
        return " ".join(s for s in kept if s)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _sentence_key(sentence: str) -> str:
    """A sentence as compared for repeats: its words, lowercase, without punctuation."""
    return " ".join(re.findall(r"[a-z0-9]+", sentence.lower()))


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
    """The history as (role, text) lines for a model: what was said, tool results as notes, and
    what a person who took the call over said, as a note (the model did not say it; the takeover's
    and handback's own markers stay out: the caller's last words end the context)."""
    for turn in turns:
        if turn.speaker == PERSON:
            if turn.role == "assistant":
                yield "system", f'A human colleague ({turn.agent}) said to the caller: "{turn.content}"'
        elif turn.role in ("user", "assistant"):
            yield turn.role, turn.content
        elif turn.role == "tool":
            yield "system", f"Earlier, tool {turn.tool_name} returned: {turn.content}"


def chat_request(ctx: TurnContext, messages: list[dict[str, Any]], memory: dict[str, Any]) -> ChatRequest:
    """One model round's request for the agent of ``ctx``: its tools and settings."""
    agent = ctx.agent
    return ChatRequest(
        messages=messages,
        tools=[t.to_openai() for t in ctx.tools],
        model=agent.model,
        temperature=agent.temperature,
        top_p=agent.top_p,
        max_tokens=agent.max_tokens,
        agent=agent.name,
        scenario=ctx.scenario.name,
        memory=memory,
    )


def error_content(kind: str, message: str) -> str:
    """A tool call's output when it was not run (or not to the end): an error the model can read."""
    return json.dumps({"error": {"type": kind, "message": message}})


async def say_fillers(host: ToolHost, agent: AgentSpec, settings: TurnTaking, say: SayFiller) -> None:
    """Fill the silence while tools run, until cancelled (when they have answered): once the agent
    has been quiet for ``filler_after_ms`` (nothing of its audio left to play), it says its first
    filler; after that one has played and another ``filler_after_ms`` has passed, the next (the
    list cycles). So no silence while a tool runs lasts much longer than ``filler_after_ms`` plus
    the synthesis of a short line. 0 or no fillers: never."""
    after = settings.filler_after_ms / 1000.0
    if after <= 0 or not settings.fillers:
        return
    loop = asyncio.get_running_loop()
    for line in itertools.cycle(settings.fillers):
        await asyncio.sleep(after)
        # the agent's own audio (what it said before the call, the previous filler) plays out first
        while (left := host.playback_end + after - loop.time()) > 0.001:
            await asyncio.sleep(left)
        try:
            await say(line, agent)
        except Exception:  # the tools go on; only the filler is lost
            logger.exception("session %s: a filler could not be said", host.session_id)
            return


async def run_tool_round(
    host: ToolHost,
    ctx: TurnContext,
    calls: list[ToolCallRequest],
    reply: Callable[[ToolCallRequest, str], None],
    say_filler: SayFiller | None = None,
) -> HandoffOutcome | None:
    """Execute one model round's tool calls, handoffs last; every call gets exactly one ``reply``.

    Ordinary calls run in order through the registry (a tool not offered to the agent is refused,
    never run), each with a ``ToolCall`` event and a ``tool`` history turn; while they run, the
    pipeline's ``say_filler`` fills silences longer than ``filler_after_ms`` (:func:`say_fillers`),
    never once they have answered. Of the handoff calls the first is performed (the others are
    answered "one handoff at a time"): the state's active agent switches, the handoff is recorded
    in the store and a ``Handoff`` event emitted. Returns the outcome of that handoff, or ``None``
    when the agent stays.
    """
    assert host.state is not None
    handoffs = [c for c in calls if ctx.handoff_map.is_handoff_tool(c.name)]
    fillers: asyncio.Task | None = None
    if say_filler is not None and len(handoffs) < len(calls):
        settings = host.turn_taking_for(ctx.agent)
        fillers = asyncio.get_running_loop().create_task(say_fillers(host, ctx.agent, settings, say_filler))
    try:
        await _run_calls(host, ctx, [c for c in calls if c not in handoffs], reply, fillers)
    finally:
        if fillers is not None:
            fillers.cancel()
    if not handoffs:
        return None
    return await _run_handoff(host, ctx, handoffs, reply)


async def _run_calls(
    host: ToolHost,
    ctx: TurnContext,
    calls: list[ToolCallRequest],
    reply: Callable[[ToolCallRequest, str], None],
    fillers: asyncio.Task | None,
) -> None:
    """The round's ordinary calls, in order; the fillers stop the moment the last one answers."""
    assert host.state is not None
    tool_ctx = ToolContext(
        session_id=host.session_id, agent=ctx.agent.name, scenario=ctx.scenario.name, memory=host.state.memory
    )
    by_name = {t.name: t for t in ctx.tools}
    for call in calls:
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
        if fillers is not None and call is calls[-1]:
            fillers.cancel()
        reply(call, content)
        await record_tool(host, ctx.agent.name, call, value, ok, duration, content)


async def _run_handoff(
    host: ToolHost,
    ctx: TurnContext,
    handoffs: list[ToolCallRequest],
    reply: Callable[[ToolCallRequest, str], None],
) -> HandoffOutcome | None:
    """The first handoff call of a round performed, the others answered."""
    assert host.state is not None
    state = host.state
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
    turn = Turn(role="tool", content=content, agent=agent, tool_name=call.name, tool_call_id=call.id or None)
    turn.arguments = args if isinstance(args, dict) else {"_raw": call.arguments}
    await host.add_turn(turn)
