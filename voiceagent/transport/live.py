"""Which conversations are live right now, in every worker process, so that a dashboard opened
mid-conversation can list them (a dashboard otherwise learns of a session only from the
``session_started`` it happens to see).

The relay (:func:`.relay.publish`) shows this registry every message a session publishes to
the dashboards: ``session_started`` adds the session, ``session_ended`` removes it, agent and state
changes update it. Each process keeps its own sessions in memory and writes them as one bucket to
the shared cache (Redis when ``CACHE_HOST`` is set) under a slot it claims atomically
(``cache.add``). The bucket expires ``TTL_S`` seconds after its last write and the process rewrites
it every ``REFRESH_S`` while it has sessions, so a killed worker's sessions vanish within ``TTL_S``.
A dashboard reads every slot with one ``get_many``. Nothing here may break a conversation: cache
failures are logged, not raised.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

from django.core.cache import cache

from voiceagent import cache_io
from voiceagent.outage import OutageLog
from voiceagent.transport.envelope import envelope

logger = logging.getLogger(__name__)
cache_outage = OutageLog(
    logger,
    "session cache (live session registry)",
    "dashboards on other workers miss this worker's sessions until it is back",
)

SLOT_KEY = "live:slot:{}"
MAX_SLOTS = 128  # worker processes sharing one cache; one more is logged and served from memory
TTL_S = 30.0
REFRESH_S = 10.0


class LiveRegistry:
    """This process's live sessions, mirrored to a slot of the shared cache."""

    def __init__(self, ttl_s: float = TTL_S, refresh_s: float = REFRESH_S, slots: int = MAX_SLOTS):
        self.ttl_s = ttl_s
        self.refresh_s = refresh_s
        self.slots = slots
        self._nonce = uuid.uuid4().hex[:8]
        self._sessions: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()  # cache writes run on threads; one at a time, newest wins
        self._version = 0
        self._written = 0
        self._slot: int | None = None
        self._task: asyncio.Task | None = None
        self._warned = False

    @property
    def worker(self) -> str:
        return f"{socket.gethostname()}:{os.getpid()}:{self._nonce}"

    def is_live(self, session_id: str) -> bool:
        """Whether this process registered ``session_id`` and has not seen it end."""
        return session_id in self._sessions

    # --- writers (the relay) ----------------------------------------------------------------------
    def observe(self, message: dict[str, Any]) -> bool:
        """Follow one message published to the dashboards; True when a session started, ended or
        changed agent, which the caller then writes (:meth:`flush`) before relaying the message, so
        that a dashboard opening next sees it. State changes (several a turn) ride the next refresh."""
        session_id = message.get("session_id")
        if not session_id:
            return False
        payload = message.get("payload") or {}
        name = payload.get("name") if message.get("type") == "event" else None
        if name == "session_started":
            self._sessions[session_id] = {
                "session_id": session_id,
                "transport": payload.get("transport"),
                "started_ts": message.get("ts") or round(time.time(), 3),
                "agent": payload.get("agent"),
                "state": None,
                **({"monitor": True} if payload.get("monitor") else {}),  # an AudioHook monitor
            }
            self._ensure_refresher()
            return True
        if name == "session_ended":
            return self._sessions.pop(session_id, None) is not None
        entry = self._sessions.get(session_id)
        if entry is None:
            return False
        if name == "state":
            entry["state"] = payload.get("state")
        if name in ("takeover", "handback"):  # a dashboard opening next shows who has the call
            entry["taken_over_by"] = payload.get("by") if name == "takeover" else None
            return True
        agent = payload.get("to") if name == "handoff" else payload.get("agent")
        if agent and agent != entry["agent"]:
            entry["agent"] = agent
            return True
        return False

    async def flush(self) -> None:
        """Write this process's sessions to its slot now."""
        self._version += 1
        entries = {sid: dict(entry) for sid, entry in self._sessions.items()}
        try:
            await cache_io.call(self._write, self._version, entries)
        except Exception as exc:  # logged when an outage starts and ends, not at every refresh
            cache_outage.failed(exc)
        else:
            cache_outage.ok()

    def _write(self, version: int, entries: dict[str, dict[str, Any]]) -> None:
        with self._lock:
            if version <= self._written:  # a newer state was written already
                return
            self._written = version
            worker = self.worker
            if not entries:
                if self._slot is not None:
                    key = SLOT_KEY.format(self._slot)
                    current = cache.get(key)
                    if isinstance(current, dict) and current.get("worker") == worker:
                        cache.delete(key)
                    self._slot = None
                return
            bucket = {"worker": worker, "sessions": entries, "written": time.time()}
            if self._slot is not None:
                key = SLOT_KEY.format(self._slot)
                current = cache.get(key)
                if isinstance(current, dict) and current.get("worker") == worker:
                    cache.set(key, bucket, self.ttl_s)
                    return
                if current is None and cache.add(key, bucket, self.ttl_s):
                    return
                self._slot = None  # it expired while we were silent and another process took it
            for slot in range(self.slots):
                if cache.add(SLOT_KEY.format(slot), bucket, self.ttl_s):
                    self._slot = slot
                    return
            if not self._warned:
                self._warned = True
                logger.warning(
                    "live session registry: all %d slots are taken; dashboards on other workers will "
                    "not list this worker's sessions",
                    self.slots,
                )

    def _ensure_refresher(self) -> None:
        loop = asyncio.get_running_loop()
        task = self._task
        if task is None or task.done() or task.get_loop() is not loop:
            self._task = loop.create_task(self._refresh())

    async def _refresh(self) -> None:
        while self._sessions:
            await asyncio.sleep(self.refresh_s)
            await self.flush()

    # --- readers (the dashboard) ------------------------------------------------------------------
    async def live(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """Every live session of every worker (or only ``session_id``), oldest first."""
        try:
            buckets = await cache_io.call(self._read)
        except Exception as exc:
            logger.warning("live session registry: the cache read failed: %s", exc)
            buckets = []
        found: dict[str, dict[str, Any]] = {}
        for bucket in buckets:
            sessions = bucket.get("sessions") if isinstance(bucket, dict) else None
            if isinstance(sessions, dict):
                found.update(sessions)
        found.update({sid: dict(entry) for sid, entry in self._sessions.items()})
        entries = [e for sid, e in found.items() if session_id is None or sid == session_id]
        return sorted(entries, key=lambda e: e.get("started_ts") or 0)

    def _read(self) -> list[Any]:
        return list(cache.get_many([SLOT_KEY.format(slot) for slot in range(self.slots)]).values())

    def reset(self) -> None:
        """Forget this process's sessions (tests); the cache is the caller's to clear."""
        self._sessions.clear()
        self._slot = None
        self._task = None


def snapshot_message(entry: dict[str, Any]) -> dict[str, Any]:
    """A live session as the ``session_started`` event a dashboard would have seen, marked
    ``snapshot: true`` (CONTRACTS envelope)."""
    session_id = entry["session_id"]
    payload = {"name": "session_started", "session_id": session_id, "snapshot": True}
    payload.update({k: entry.get(k) for k in ("transport", "agent", "state", "started_ts")})
    if entry.get("taken_over_by"):
        payload["taken_over_by"] = entry["taken_over_by"]
    if entry.get("monitor"):
        payload["monitor"] = True
    return envelope(session_id, "event", payload)


live_sessions = LiveRegistry()
