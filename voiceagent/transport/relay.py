"""Channel-layer groups that carry a session's server messages to dashboards on any worker.

Groups: ``dashboard`` (every session) and ``session.<id>`` (one session). Audio chunks are heavy
(50 per second per conversation), so they go only to the per-session group and only while a
dashboard follows that session with ``audio=1``: the follower marks the session in the shared
cache (TTL refreshed while it is connected) and the sender checks the mark at most once a second,
in the background once it has a first answer (an audio send never waits for the cache).

Every message bound for all dashboards also passes :data:`.live.live_sessions`, the registry
of live sessions that a dashboard is sent when it connects.

Nothing here may end a conversation: while the cache or the channel layer is down (a Redis
outage), the audio flag keeps its last value, publishing is skipped, and each outage is logged
once when it starts and once when it ends (:class:`voiceagent.outage.OutageLog`), not per frame.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import re
import time
from typing import Any

from django.core.cache import cache

from voiceagent import cache_io
from voiceagent.outage import OutageLog
from voiceagent.transport.envelope import envelope
from voiceagent.transport.live import live_sessions

logger = logging.getLogger(__name__)
flag_outage = OutageLog(
    logger, "session cache (dashboard audio flags)", "conversations go on; audio flags keep their last value"
)
relay_outage = OutageLog(
    logger, "channel layer (dashboard relay)", "conversations go on; dashboards miss their messages meanwhile"
)

ALL_GROUP = "dashboard"
_GROUP_SAFE = re.compile(r"^[A-Za-z0-9_.-]{1,80}$")
AUDIO_FLAG = "relay:audio:{}"
AUDIO_FLAG_TTL = 60
PRESENCE_KEY = "relay:dashboards"
PRESENCE_TTL = 30


class DashboardPresence:
    """Whether any dashboard, on any worker, is connected. While none is, sockets relay only session
    events (``type: event``: what :data:`.live.live_sessions` follows, so a dashboard that opens
    later gets its snapshot) and skip transcripts, response deltas and levels: at hundreds of
    conversations those are thousands of channel-layer publishes a second that nobody reads.

    Dashboards of this process count at once (:attr:`local`); the others' mark in the shared cache
    (refreshed while they are connected) is read at most once a second, in a task of its own (a
    worker thread for a network cache, :mod:`voiceagent.cache_io`), never on a socket's path.
    Until the first read, and while the cache cannot answer, the last value holds (at start:
    present, so nothing is skipped before it is known)."""

    def __init__(self) -> None:
        self.local = 0
        self._remote = True
        self._checked = 0.0
        self._refresh: asyncio.Task | None = None

    def any(self) -> bool:
        if self.local:
            return True
        now = time.monotonic()
        loop = asyncio.get_running_loop()
        reading = self._refresh is not None and not self._refresh.done() and self._refresh.get_loop() is loop
        if now - self._checked >= 1.0 and not reading:
            self._checked = now
            self._refresh = loop.create_task(self._read())
        return self._remote

    async def _read(self) -> None:
        try:
            self._remote = bool(await cache_io.call(cache.get, PRESENCE_KEY))
        except Exception as exc:  # an outage: keep the last value (the relay logs the outage)
            logger.debug("dashboard presence not read: %s", exc)


presence = DashboardPresence()


async def mark_dashboards_present() -> None:
    """A dashboard is connected (on this worker): tell the other workers' sockets to relay."""
    try:
        await cache_io.call(cache.set, PRESENCE_KEY, 1, PRESENCE_TTL)
    except Exception as exc:  # the cache is down: its outage is logged elsewhere
        logger.debug("dashboard presence not marked: %s", exc)


def session_group(session_id: str) -> str:
    """A valid channel-layer group name for a session (ids may hold ':' which groups may not)."""
    if _GROUP_SAFE.match(session_id):
        return f"session.{session_id}"
    return "session.h" + hashlib.sha256(session_id.encode()).hexdigest()[:32]


def relay_event(message: dict[str, Any]) -> dict[str, Any]:
    return {"type": "relay.message", "message": message}


class AudioRelayFlag:
    """Whether some dashboard wants this session's audio (checked at most once a second; while the
    cache cannot answer, the last value read).

    Only the first check waits for the cache; later ones answer with the value in hand and refresh
    it in the background. Why: a network cache is read in a worker thread (:mod:`voiceagent.cache_io`;
    Django's own async API, used before, ran on its single sync thread, which the database shares),
    and an audio send whose check fell due waited for it, typically the first audio of an answer.
    """

    def __init__(self, session_id: str):
        self.key = AUDIO_FLAG.format(session_id)
        self._checked = 0.0
        self._value: bool | None = None
        self._refresh: asyncio.Task | None = None

    async def wanted(self) -> bool:
        now = time.monotonic()
        if now - self._checked >= 1.0 and (self._refresh is None or self._refresh.done()):
            self._checked = now
            if self._value is None:
                await self._read()
                self._value = bool(self._value)  # even unanswered: later checks go to the background
            else:
                self._refresh = asyncio.get_running_loop().create_task(self._read())
        return bool(self._value)

    async def _read(self) -> None:
        try:
            value = bool(await cache_io.call(cache.get, self.key))
        except Exception as exc:  # a cache outage must not end the socket that sends audio
            flag_outage.failed(exc)
            return
        flag_outage.ok()
        self._value = value


async def mark_audio_wanted(session_id: str) -> None:
    """A dashboard follows ``session_id`` with audio (refreshed while it is connected); a cache
    outage only delays it until the next refresh."""
    try:
        await cache_io.call(cache.set, AUDIO_FLAG.format(session_id), 1, AUDIO_FLAG_TTL)
    except Exception as exc:
        flag_outage.failed(exc)
    else:
        flag_outage.ok()


async def publish(channel_layer, message: dict[str, Any], *, dashboards: bool = True) -> None:
    """A session's server message to the dashboards following it (and to every dashboard when
    ``dashboards``). The relay must never break a conversation: failures are not raised, and an
    outage of the channel layer is logged when it starts and when it ends, not per message."""
    if channel_layer is None:
        return
    if dashboards and live_sessions.observe(message):
        await live_sessions.flush()  # before the relay: a dashboard opening next lists it
    event = relay_event(message)
    try:
        await channel_layer.group_send(session_group(message["session_id"]), event)
        if dashboards:
            await channel_layer.group_send(ALL_GROUP, event)
    except Exception as exc:
        relay_outage.failed(exc)
    else:
        relay_outage.ok()


def _ended_message(session_id: str, reason: str) -> dict[str, Any] | None:
    """``session_ended`` for a session this process still lists as live, else None."""
    if not (session_id and live_sessions.is_live(session_id)):
        return None
    payload = {"name": "session_ended", "reason": reason, "session_id": session_id}
    return envelope(session_id, "event", payload)


async def end_if_live(channel_layer, session_id: str, reason: str) -> None:
    """Tell the dashboards that a session this process still lists as live has ended (a socket
    that went away without its own ``session_ended``)."""
    if (message := _ended_message(session_id, reason)) is not None:
        await publish(channel_layer, message)


class RelayQueue:
    """One socket's messages to the dashboards, published in order by a task of their own.

    Why: a publish is two or three Redis round trips per group (channels-redis ``group_send``),
    12 ms on average and up to half a second in a soak of 100 conversations on one worker; a socket
    that awaited each publish before sending its next message made the first audio of every answer
    wait behind the publishes of the text before it (end of turn -> first audio p99 0.7-2 s of
    server time, bench/bench_soak.py). The socket's own client never waits for the relay now.
    Bounded: ``max_messages`` behind (a hung channel layer), the oldest is dropped, counted in
    :attr:`dropped` and logged once per socket. :meth:`close` gives what is queued ``timeout``
    seconds to go out.
    """

    def __init__(self, channel_layer, max_messages: int = 1000) -> None:
        self.channel_layer = channel_layer
        self.max_messages = max_messages
        self.dropped = 0
        self._items: collections.deque[tuple[dict[str, Any], bool]] = collections.deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closing = False

    def put(self, message: dict[str, Any], *, dashboards: bool = True) -> None:
        """Queue ``message`` for :func:`publish` (never waits); with no dashboard anywhere, only
        session events (see :class:`DashboardPresence`)."""
        if self.channel_layer is None or self._closing:
            return
        if message.get("type") != "event" and not presence.any():
            return
        if len(self._items) >= self.max_messages:
            self._items.popleft()
            self.dropped += 1
            if self.dropped == 1:
                logger.warning(
                    "dashboard relay of session %s is %d messages behind: the oldest are dropped",
                    message.get("session_id") or "-",
                    self.max_messages,
                )
        self._items.append((message, dashboards))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="dashboard-relay")
        self._wake.set()

    def end_if_live(self, session_id: str, reason: str) -> None:
        """Queue ``session_ended`` for a session still listed as live (see :func:`end_if_live`)."""
        if (message := _ended_message(session_id, reason)) is not None:
            self.put(message)

    async def close(self, timeout: float = 2.0) -> None:
        """No more messages; what is queued gets ``timeout`` seconds, then is dropped."""
        self._closing = True
        task = self._task
        if task is None or task.done():
            return
        self._wake.set()
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(task)
        except TimeoutError:
            self.dropped += len(self._items)
            self._items.clear()
            task.cancel()

    async def _run(self) -> None:
        while True:
            if self._items:
                message, dashboards = self._items.popleft()
                await publish(self.channel_layer, message, dashboards=dashboards)
                continue
            if self._closing:
                return
            self._wake.clear()
            await self._wake.wait()
