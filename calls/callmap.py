"""Which session a phone call belongs to, shared by every worker.

The REST side (``/calls/initiate``, ``/calls/answer``) learns a call's connection id from the
telephony provider and creates its session; the media stream (``/media/stream``) arrives later,
possibly on another worker, carrying only ``x-ms-call-connection-id``. This map (the session
cache: Redis when ``CACHE_HOST`` is set) joins the two. The call record in the database is the
durable history; this entry is the hot lookup and expires with the call.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from django.core.cache import cache

from voiceagent import cache_io

__all__ = ["CallInfo", "audio_format_for", "forget", "lookup", "remember"]

KEY = "call:{}"
TTL_S = 6 * 3600  # longer than any call; refreshed by nothing (a call's entry is written once)


@dataclass(frozen=True)
class CallInfo:
    connection_id: str
    session_id: str
    scenario: str
    mode: str  # TELEPHONY_STREAMING_MODE when the call started: MEDIA | TRANSCRIPTION | VOICE_LIVE
    direction: str  # inbound | outbound
    phone_number: str | None = None


def audio_format_for(mode: str) -> str:
    """The media stream's audio format for a call mode (``/media/status`` reports the same):
    the live engine talks 24 kHz to the realtime API, the cascade 16 kHz to STT."""
    return "pcm24KMono" if mode == "VOICE_LIVE" else "pcm16KMono"


async def remember(info: CallInfo) -> None:
    await cache_io.call(cache.set, KEY.format(info.connection_id), asdict(info), TTL_S)


async def lookup(connection_id: str) -> CallInfo | None:
    if not connection_id or len(connection_id) > 200:
        return None
    raw = await cache_io.call(cache.get, KEY.format(connection_id))
    if not isinstance(raw, dict):
        return None
    try:
        return CallInfo(**raw)
    except TypeError:  # an entry written by another version
        return None


async def forget(connection_id: str) -> None:
    await cache_io.call(cache.delete, KEY.format(connection_id))
