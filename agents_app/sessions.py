"""Sessions: live state in the session cache (TTL), history in the database, turn by turn.

:class:`DjangoSessionStore` is the engine's :class:`~voiceagent.conversation.session.SessionStore`
(async; blocking cache and ORM calls run in worker threads; a cache or database outage is ridden
out by :mod:`agents_app.state_writer` and :mod:`agents_app.history_writer`, never raised into a
conversation). The sync helpers below serve REST and raise, so that a reader answers 503.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
import weakref
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import close_old_connections, transaction

from agents_app.history_writer import HistoryWriter
from agents_app.models import HandoffRecord, HistoryTurn, Session
from agents_app.state_writer import PendingStates
from voiceagent import cache_io
from voiceagent.conversation.session import HandoffEvent, SessionState, Turn

logger = logging.getLogger("agents_app.sessions")
KEY = "session:{}"


def _ttl() -> int:
    return settings.CONFIG.SESSION_TTL_SECONDS


def new_session_id() -> str:
    return uuid.uuid4().hex


def load_state(session_id: str) -> SessionState | None:
    data = cache.get(KEY.format(session_id))
    return SessionState.from_dict(data) if data else None


def save_state(state: SessionState, touch: bool = True) -> None:
    if touch:
        state.last_activity_at = time.time()
    cache.set(KEY.format(state.session_id), state.to_dict(), _ttl())


def delete_state(session_id: str) -> None:
    cache.delete(KEY.format(session_id))


def create_session(
    session_id: str,
    scenario: str,
    start_agent: str,
    transport: str | None = None,
    previous_session_id: str | None = None,
) -> SessionState:
    """A new session: cache state and its database record."""
    state = SessionState(
        session_id=session_id,
        scenario=scenario,
        active_agent=start_agent,
        transport=transport,
        previous_session_id=previous_session_id,
    )
    Session.objects.update_or_create(
        session_id=session_id,
        defaults={"scenario": scenario, "transport": transport, "previous_session_id": previous_session_id},
    )
    save_state(state)
    return state


def history(session_id: str, limit: int | None = None) -> list[dict[str, Any]]:
    turns = HistoryTurn.objects.filter(session_id=session_id).order_by("at", "id")
    if limit:
        turns = turns.reverse()[:limit][::-1]
    return [
        {
            "role": t.role,
            "content": t.content,
            "agent": t.agent,
            "at": t.at,
            **({"tool_name": t.tool_name} if t.tool_name else {}),
            **({"tool_call_id": t.tool_call_id} if t.tool_call_id else {}),
            **({"arguments": t.tool_arguments} if t.tool_arguments is not None else {}),
            **({"latency_ms": t.latency_ms, "usage": t.usage} if t.latency_ms is not None else {}),
            **({"heard": t.heard} if t.heard else {}),
            **({"speaker": t.speaker} if t.speaker else {}),
        }
        for t in turns
    ]


_known_sessions: set[str] = set()


def _ensure_session_row(session_id: str, scenario: str = "", transport: str | None = None) -> None:
    """One existence check per session and process, not one per turn."""
    if session_id in _known_sessions:
        return
    Session.objects.get_or_create(
        session_id=session_id, defaults={"scenario": scenario, "transport": transport}
    )
    if len(_known_sessions) > 100_000:
        _known_sessions.clear()
    _known_sessions.add(session_id)


def write_turn(session_id: str, turn: Turn, scenario: str = "", transport: str | None = None) -> None:
    _ensure_session_row(session_id, scenario, transport)
    _history_row(session_id, turn).save()
    Session.objects.filter(session_id=session_id).update(last_activity_at=_now())


def storable(value: Any) -> Any:
    """``value`` with every NUL character (in strings, keys included) made U+FFFD: PostgreSQL's
    text and jsonb refuse NUL, and a turn that holds one (a typed line, a tool's result or a model's
    arguments) was lost from the history, row by row, with an ERROR."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    return value


def _history_row(session_id: str, turn: Turn) -> HistoryTurn:
    return HistoryTurn(
        session_id=session_id,
        role=turn.role,
        content=storable(turn.content),
        agent=turn.agent,
        tool_name=storable(turn.tool_name),
        at=turn.at,
        latency_ms=turn.latency_ms,
        usage=turn.usage,
        heard=storable(turn.heard),
        uid=turn.uid,
        tool_call_id=storable(turn.tool_call_id),
        tool_arguments=storable(turn.arguments),
        speaker=turn.speaker,
    )


def write_handoff(session_id: str, event: HandoffEvent) -> None:
    _ensure_session_row(session_id)
    HandoffRecord.objects.create(
        session_id=session_id,
        from_agent=event.from_agent,
        to_agent=event.to_agent,
        type=event.type,
        at=event.at,
    )


def _now():
    from django.utils import timezone

    return timezone.now()


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{int(epoch % 1 * 1000):03d}Z"


def session_body(session_id: str) -> dict[str, Any] | None:
    """The ``GET /sessions/{id}`` body, or None when the session is unknown."""
    state = load_state(session_id)
    record = Session.objects.filter(session_id=session_id).first()
    if state is None and record is None:
        return None
    if state is not None:
        handoffs = [
            {"from": h["from"], "to": h["to"], "type": h["type"], "at": _iso(h.get("at"))}
            for h in state.handoffs
        ]
        body = {
            "session_id": session_id,
            "scenario": state.scenario,
            "active_agent": state.active_agent,
            "created_at": _iso(state.created_at),
            "last_activity_at": _iso(state.last_activity_at),
            "transport": state.transport,
            "memory": _public_memory(state.memory),
            "expired": False,
        }
    else:  # state expired: the durable record remains readable
        handoffs = [
            {"from": h.from_agent, "to": h.to_agent, "type": h.type, "at": _iso(h.at)}
            for h in record.handoff_records.all()
        ]
        last = handoffs[-1]["to"] if handoffs else None
        body = {
            "session_id": session_id,
            "scenario": record.scenario,
            "active_agent": last,
            "created_at": record.created_at.isoformat().replace("+00:00", "Z"),
            "last_activity_at": record.last_activity_at.isoformat().replace("+00:00", "Z"),
            "transport": record.transport,
            "memory": {},
            "expired": True,
        }
    body["history"] = [{**t, "at": _iso(t["at"])} for t in history(session_id)]
    body["handoffs"] = handoffs
    body["previous_session_id"] = (
        state.previous_session_id if state else (record.previous_session_id if record else None)
    )
    return body


SECRET_MEMORY_KEYS = {"mfa_code_hash", "mfa"}


def _public_memory(memory: dict[str, Any]) -> dict[str, Any]:
    """Session memory as shown over REST: the profile's verification data and MFA secrets stay out."""
    shown = {}
    for key, value in memory.items():
        if key in SECRET_MEMORY_KEYS or key.startswith("_"):
            continue
        if key == "caller_profile" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k not in ("verification",)}
        shown[key] = value
    return shown


_writers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_states: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def history_writer() -> HistoryWriter:
    """The history writer of the running event loop."""
    loop = asyncio.get_running_loop()
    writer = _writers.get(loop)
    if writer is None:
        writer = _writers[loop] = HistoryWriter(_write_batch_off_loop)
    return writer


def state_writer() -> PendingStates:
    """The session-state writer of the running event loop (keeps states a cache outage held back)."""
    loop = asyncio.get_running_loop()
    writer = _states.get(loop)
    if writer is None:
        writer = _states[loop] = PendingStates(_write_state_off_loop)
    return writer


async def _write_batch_off_loop(batch: list[tuple]) -> None:
    await db_call(write_batch, batch)


async def _write_state_off_loop(session_id: str, data: dict[str, Any]) -> None:
    await cache_call(write_state, session_id, data)


def write_state(session_id: str, data: dict[str, Any]) -> None:
    """Write a state snapshot (``SessionState.to_dict()``) to the cache; raises when it is down."""
    cache.set(KEY.format(session_id), data, _ttl())


def write_batch(batch: list[tuple]) -> None:
    """Write queued ("turn", session, turn, scenario, transport) / ("handoff", session, event) rows
    and ("correct", session, turn) corrections, in order, all or none (one transaction), so that
    the writer's retry never duplicates a row."""
    try:
        with transaction.atomic():
            _write_batch(batch)
    except Exception:
        for item in batch:  # a session row made in the rolled-back transaction is not there
            _known_sessions.discard(item[1])
        raise


def _write_batch(batch: list[tuple]) -> None:
    turns: list[HistoryTurn] = []
    records = []
    for item in batch:
        if item[0] == "correct":  # after the rows before it (its own may be in this batch)
            _save_turns(turns)
            turns = []
            _correct(item[1], item[2])
        elif item[0] == "turn":
            _, session_id, turn, scenario, transport = item
            _ensure_session_row(session_id, scenario, transport)
            turns.append(_history_row(session_id, turn))
        else:
            _, session_id, event = item
            _ensure_session_row(session_id)
            records.append(
                HandoffRecord(
                    session_id=session_id,
                    from_agent=event.from_agent,
                    to_agent=event.to_agent,
                    type=event.type,
                    at=event.at,
                )
            )
    _save_turns(turns)
    if records:
        HandoffRecord.objects.bulk_create(records)


def _save_turns(turns: list[HistoryTurn]) -> None:
    if turns:
        HistoryTurn.objects.bulk_create(turns)
        Session.objects.filter(session_id__in={t.session_id for t in turns}).update(last_activity_at=_now())


def _correct(session_id: str, turn: Turn) -> None:
    """A reply written when sent becomes what was heard (or goes, when none of it was)."""
    rows = HistoryTurn.objects.filter(session_id=session_id, uid=turn.uid)
    if not turn.content:
        rows.delete()
        return
    content, heard = storable(turn.content), storable(turn.heard)
    rows.update(content=content, heard=heard, latency_ms=turn.latency_ms, usage=turn.usage)


FLUSH_WAIT_S = 10.0


class DjangoSessionStore:
    """The engine's session store: cache state + database history, never blocking the loop.

    Writes never raise into the engine: a state the cache refuses is kept and retried
    (:class:`~agents_app.state_writer.PendingStates`), history rows are queued and retried
    (:class:`~agents_app.history_writer.HistoryWriter`). Waiting for the history is bounded by
    :data:`FLUSH_WAIT_S`, so a database outage delays a conversation's end, never blocks it.
    """

    async def load(self, session_id: str) -> SessionState | None:
        kept = state_writer().latest(session_id)  # this process's newest, not yet in the cache
        if kept is not None:
            return SessionState.from_dict(kept)
        return await cache_call(load_state, session_id)

    async def save(self, state: SessionState) -> None:
        state.last_activity_at = time.time()
        await state_writer().save(state.session_id, state.to_dict())

    async def append_turn(self, state: SessionState, turn: Turn) -> None:
        await history_writer().put(("turn", state.session_id, turn, state.scenario, state.transport))

    async def correct_turn(self, state: SessionState, turn: Turn) -> None:
        await history_writer().put(("correct", state.session_id, turn))

    async def record_handoff(self, state: SessionState, event: HandoffEvent) -> None:
        state.handoffs.append(
            {"from": event.from_agent, "to": event.to_agent, "type": event.type, "at": event.at}
        )
        await history_writer().put(("handoff", state.session_id, event))
        await self.save(state)

    async def flush(self, session_id: str | None = None) -> None:
        """Wait until queued history (of ``session_id``, or all) is written (at most :data:`FLUSH_WAIT_S`)."""
        await history_writer().flush(FLUSH_WAIT_S, session_id)

    async def history(self, session_id: str, limit: int | None = None) -> list[Turn]:
        await history_writer().flush(FLUSH_WAIT_S, session_id)  # read your own writes, not everyone's
        rows = await db_call(history, session_id, limit)
        return [
            Turn(
                role=r["role"],
                content=r["content"],
                agent=r["agent"],
                tool_name=r.get("tool_name"),
                at=r["at"],
                latency_ms=r.get("latency_ms"),
                usage=r.get("usage"),
                heard=r.get("heard"),
                tool_call_id=r.get("tool_call_id"),
                arguments=r.get("arguments"),
                speaker=r.get("speaker"),
            )
            for r in rows
        ]


async def db_call(fn, *args):
    """Run blocking ORM/cache work off the event loop.

    SQLite allows one writer at a time (the in-memory test database even fails at once with
    "table is locked"), so with SQLite every call goes through Django's single sync thread;
    with PostgreSQL calls run in parallel worker threads, each releasing its connection.
    """
    from asgiref.sync import sync_to_async
    from django.db import connection

    if connection.vendor == "sqlite":
        return await sync_to_async(fn, thread_sensitive=True)(*args)
    return await asyncio.to_thread(in_db_thread, fn, *args)


async def cache_call(fn, *args):
    """Run cache-only work (no ORM) off the loop when the cache is across a network, inline when it
    is in-process (:mod:`voiceagent.cache_io`). Not through :func:`db_call`: with SQLite that is
    Django's single sync thread, where a session-state save queued behind history writes and
    waited out a locked database (up to its busy timeout) before ``listening``."""
    return await cache_io.call(fn, *args)


def in_db_thread(fn, *args):
    """Run ORM work in the current worker thread and release its connection afterwards."""
    try:
        return fn(*args)
    finally:
        close_old_connections()
