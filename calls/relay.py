"""Channel-layer groups that carry a session's server messages to dashboards on any worker.

Groups: ``dashboard`` (every session) and ``session.<id>`` (one session). Audio chunks are heavy
(50 per second per conversation), so they go only to the per-session group and only while a
dashboard follows that session with ``audio=1``: the follower marks the session in the shared
cache (TTL refreshed while it is connected) and the sender checks the mark at most once a second.

Every message bound for all dashboards also passes :data:`calls.live.live_sessions`, the registry
of live sessions that a dashboard is sent when it connects.

Nothing here may end a conversation: while the cache or the channel layer is down (a Redis
outage), the audio flag keeps its last value, publishing is skipped, and each outage is logged
once when it starts and once when it ends (:class:`voiceagent.outage.OutageLog`), not per frame.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from typing import Any

from django.core.cache import cache

from calls.live import live_sessions
from voiceagent.outage import OutageLog

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


def session_group(session_id: str) -> str:
    """A valid channel-layer group name for a session (ids may hold ':' which groups may not)."""
    if _GROUP_SAFE.match(session_id):
        return f"session.{session_id}"
    return "session.h" + hashlib.sha256(session_id.encode()).hexdigest()[:32]


def relay_event(message: dict[str, Any]) -> dict[str, Any]:
    return {"type": "relay.message", "message": message}


class AudioRelayFlag:
    """Whether some dashboard wants this session's audio (checked at most once a second; while the
    cache cannot answer, the last value read)."""

    def __init__(self, session_id: str):
        self.key = AUDIO_FLAG.format(session_id)
        self._checked = 0.0
        self._value = False

    async def wanted(self) -> bool:
        now = time.monotonic()
        if now - self._checked >= 1.0:
            self._checked = now
            try:
                value = bool(await cache.aget(self.key))
            except Exception as exc:  # a cache outage must not end the socket that sends audio
                flag_outage.failed(exc)
                return self._value
            flag_outage.ok()
            self._value = value
        return self._value


async def mark_audio_wanted(session_id: str) -> None:
    """A dashboard follows ``session_id`` with audio (refreshed while it is connected); a cache
    outage only delays it until the next refresh."""
    try:
        await cache.aset(AUDIO_FLAG.format(session_id), 1, AUDIO_FLAG_TTL)
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


async def end_if_live(channel_layer, session_id: str, reason: str) -> None:
    """Tell the dashboards that a session this process still lists as live has ended (a socket
    that went away without its own ``session_ended``)."""
    if session_id and live_sessions.is_live(session_id):
        message = {
            "type": "event",
            "payload": {"name": "session_ended", "reason": reason, "session_id": session_id},
            "session_id": session_id,
            "ts": round(time.time(), 3),
        }
        await publish(channel_layer, message)
