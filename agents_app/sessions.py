"""Sessions: live state in the session cache (TTL), history in the database, turn by turn.

:class:`DjangoSessionStore` is the engine's :class:`~voiceagent.conversation.session.SessionStore`
(async; blocking cache and ORM calls run in worker threads). The sync helpers below serve REST.
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
from django.db import close_old_connections

from agents_app.models import HandoffRecord, HistoryTurn, Session
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
    HistoryTurn.objects.create(
        session_id=session_id,
        role=turn.role,
        content=turn.content,
        agent=turn.agent,
        tool_name=turn.tool_name,
        at=turn.at,
    )
    Session.objects.filter(session_id=session_id).update(last_activity_at=_now())


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


class HistoryWriter:
    """Writes history rows in the background, in order, batched: off every conversation's hot path.

    A turn is queued the moment it is final and written within milliseconds; the conversation does
    not wait for the database (with SQLite all writes share one thread). ``flush()`` waits until
    everything queued is written (conversation close, shutdown). The queue is bounded: when the
    database falls 10 000 rows behind, producers wait instead of dropping history.
    """

    def __init__(self, maxsize: int = 10_000):
        self.queue: asyncio.Queue = asyncio.Queue(maxsize)
        self.task: asyncio.Task | None = None

    async def put(self, item: tuple) -> None:
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run(), name="history-writer")
        await self.queue.put(item)

    async def flush(self) -> None:
        if self.task is not None and not self.task.done():
            await self.queue.join()

    async def _run(self) -> None:
        while True:
            batch = [await self.queue.get()]
            while not self.queue.empty() and len(batch) < 500:
                batch.append(self.queue.get_nowait())
            try:
                await db_call(write_batch, batch)
            except Exception:  # report; the rows of this batch are lost, the writer keeps going
                logger.exception("history write failed for %d row(s)", len(batch))
            finally:
                for _ in batch:
                    self.queue.task_done()


_writers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def history_writer() -> HistoryWriter:
    """The writer of the running event loop."""
    loop = asyncio.get_running_loop()
    writer = _writers.get(loop)
    if writer is None:
        writer = _writers[loop] = HistoryWriter()
    return writer


def write_batch(batch: list[tuple]) -> None:
    """Write queued ("turn", session, turn, scenario, transport) / ("handoff", session, event) rows."""
    turns = []
    records = []
    for item in batch:
        if item[0] == "turn":
            _, session_id, turn, scenario, transport = item
            _ensure_session_row(session_id, scenario, transport)
            turns.append(
                HistoryTurn(
                    session_id=session_id,
                    role=turn.role,
                    content=turn.content,
                    agent=turn.agent,
                    tool_name=turn.tool_name,
                    at=turn.at,
                )
            )
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
    if turns:
        HistoryTurn.objects.bulk_create(turns)
        Session.objects.filter(session_id__in={t.session_id for t in turns}).update(last_activity_at=_now())
    if records:
        HandoffRecord.objects.bulk_create(records)


class DjangoSessionStore:
    """The engine's session store: cache state + database history, never blocking the loop."""

    async def load(self, session_id: str) -> SessionState | None:
        return await db_call(load_state, session_id)

    async def save(self, state: SessionState) -> None:
        await db_call(save_state, state)

    async def append_turn(self, state: SessionState, turn: Turn) -> None:
        await history_writer().put(("turn", state.session_id, turn, state.scenario, state.transport))

    async def record_handoff(self, state: SessionState, event: HandoffEvent) -> None:
        state.handoffs.append(
            {"from": event.from_agent, "to": event.to_agent, "type": event.type, "at": event.at}
        )
        await db_call(save_state, state)
        await history_writer().put(("handoff", state.session_id, event))

    async def flush(self) -> None:
        """Wait until queued history is written."""
        await history_writer().flush()

    async def history(self, session_id: str, limit: int | None = None) -> list[Turn]:
        await history_writer().flush()  # read your own writes
        rows = await db_call(history, session_id, limit)
        return [
            Turn(
                role=r["role"],
                content=r["content"],
                agent=r["agent"],
                tool_name=r.get("tool_name"),
                at=r["at"],
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


def in_db_thread(fn, *args):
    """Run ORM work in the current worker thread and release its connection afterwards."""
    try:
        return fn(*args)
    finally:
        close_old_connections()
