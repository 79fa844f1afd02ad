"""Realtime voice (speech-to-speech) clients: Azure VoiceLive and the OpenAI Realtime API (GA).

One small interface for the live engine (:mod:`voiceagent.conversation.live`)::

    client = build_realtime_client(config)            # VoiceLiveClient | OpenAIRealtimeClient
    conn = await client.connect(SessionConfig(...))    # handshake + the first session.update
    await conn.send({"type": "input_audio_buffer.append", "audio": b64})
    async for event in conn: ...                       # server events as dicts, normalised names
    await conn.update_session(SessionConfig(...))      # e.g. after a handoff
    await conn.close()

Both services speak the same event protocol over one WebSocket per conversation, in two dialects:
VoiceLive uses the beta names and session shape (``response.audio.delta``,
``input_audio_format: "pcm16"``), OpenAI GA renamed a few server events
(``response.output_audio.delta``, ``response.output_audio_transcript.*``,
``conversation.item.added``) and nests the audio settings under ``session.audio``. Server events
are normalised to the beta names (:data:`GA_TO_INTERNAL`), so the engine handles one set;
``session.update`` is built per dialect from the neutral :class:`SessionConfig`. Every other
client event the engine sends (``input_audio_buffer.append``, ``conversation.item.create``,
``conversation.item.truncate``, ``response.create``, ``response.cancel``) has the same shape in
both; assistant text items are the one content-type difference and are mapped on the way out.

The SDKs make the connection (URL, auth headers, handshake) and receive raw messages, which are
decoded here to plain dicts (the SDKs' typed models would cost a validation pass per audio
frame). Events go out as JSON text on the SDK's own socket (aiohttp ``send_str`` for VoiceLive,
the websockets connection for OpenAI), the same bytes the SDKs' ``send`` would write, without
their per-message extra work; each SDK's public send is the fallback. Failures surface as
:class:`RealtimeError` (a :class:`ProviderError`): connecting (refused, timed out after
``connect_timeout`` seconds, rejected credentials: ``retryable`` says whether trying again can
help), sending, and receiving (the connection dropped). Error messages never contain the key or
token. The connection does not reconnect on its own: a realtime conversation's server state dies
with its socket, so the engine decides what a drop means.

Where it lives: :mod:`~.session` (the neutral session config, the two protocols, the error),
:mod:`~.connection` (the shared socket logic and opening), :mod:`~.voicelive` and
:mod:`~.openai_realtime` (one dialect and client each), :mod:`~.factory` (which one to build).
"""

from voiceagent.llm.realtime.factory import PROVIDER_CHOICES, build_realtime_client, realtime_provider_kind
from voiceagent.llm.realtime.openai_realtime import GA_TO_INTERNAL, OpenAIRealtimeClient
from voiceagent.llm.realtime.session import (
    DEFAULT_CONNECT_TIMEOUT_S,
    SAMPLE_RATE,
    RealtimeClient,
    RealtimeConnection,
    RealtimeError,
    SessionConfig,
)
from voiceagent.llm.realtime.voicelive import VoiceLiveClient

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "GA_TO_INTERNAL",
    "PROVIDER_CHOICES",
    "SAMPLE_RATE",
    "OpenAIRealtimeClient",
    "RealtimeClient",
    "RealtimeConnection",
    "RealtimeError",
    "SessionConfig",
    "VoiceLiveClient",
    "build_realtime_client",
    "realtime_provider_kind",
]
