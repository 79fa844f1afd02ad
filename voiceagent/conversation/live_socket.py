"""The live pipeline's link to the realtime voice service: connect, write, read, lose.

A mixin of :class:`~voiceagent.conversation.live.LiveConversation`, apart so that the socket's
care (bounded connect retries, control events before caller audio, one reader dispatching server
events, a lost connection ending the conversation) reads in one place.

Connection failures end the conversation: ``Error(code="realtime_unavailable")`` when the
initial connect fails (retried with backoff a bounded number of times: nothing was said yet, so a
retry is safe), ``Error(code="realtime_dropped")`` when the socket drops mid-conversation (never
retried: the service's conversation state died with it).
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from voiceagent.conversation.events import Error, Event
from voiceagent.conversation.providers import ProviderError
from voiceagent.llm.realtime import RealtimeClient, RealtimeConnection, RealtimeError, SessionConfig

logger = logging.getLogger("voiceagent.conversation.live")

AUDIO_DELTA = "response.audio.delta"
APPEND_HEAD = '{"type": "input_audio_buffer.append", "audio": "'


def append_event(chunk: bytes) -> str:
    """``input_audio_buffer.append`` as JSON text (base64 needs no escaping, so no json.dumps)."""
    return APPEND_HEAD + base64.b64encode(chunk).decode() + '"}'


class RealtimeLink:
    """The socket side of a live conversation (its state lives on the conversation)."""

    session_id: str
    client: RealtimeClient
    config: Any  # LiveConfig
    closed: bool
    connection: RealtimeConnection | None
    responses_requested: int
    _control: deque[dict[str, Any]]
    _audio_out: deque[bytes]
    _wake: asyncio.Event
    _lost_reported: bool
    _handlers: dict[str, Callable[[dict[str, Any]], Awaitable[None]]]
    _on_audio_delta: Callable[[dict[str, Any]], None]

    if TYPE_CHECKING:  # the conversation's own (declared here only for type checkers)

        async def emit(self, event: Event) -> None: ...

        async def close(self, reason: str = "closed") -> None: ...

    async def _connect(self, session: SessionConfig) -> RealtimeConnection:
        """Connect with bounded retries (safe: nothing has been said on this connection yet)."""
        attempts = max(1, self.config.connect_attempts)
        delay = self.config.connect_backoff_s
        last: ProviderError | None = None
        for attempt in range(1, attempts + 1):
            try:
                async with asyncio.timeout(self.config.connect_timeout_s):
                    return await self.client.connect(session)
            except TimeoutError:
                last = RealtimeError(
                    f"realtime API did not accept the connection within {self.config.connect_timeout_s:g}s"
                )
            except ProviderError as exc:
                last = exc
            except Exception as exc:  # a misconfigured client: not worth retrying
                raise RealtimeError(
                    f"realtime client failed: {type(exc).__name__}", retryable=False
                ) from None
            if not getattr(last, "retryable", True) or attempt == attempts or self.closed:
                break
            logger.info("realtime connect attempt %d/%d failed (%s); retrying", attempt, attempts, last)
            await asyncio.sleep(delay)
            delay *= 2
        assert last is not None
        raise last

    def _send(self, event: dict[str, Any]) -> None:
        """Queue a client event (control events go before waiting caller audio)."""
        if not self.closed:
            if event["type"] == "response.create":
                self.responses_requested += 1
            self._control.append(event)
            self._wake.set()

    async def _write(self) -> None:
        conn = self.connection
        assert conn is not None
        control, audio, wake = self._control, self._audio_out, self._wake
        try:
            while True:
                if control:
                    await conn.send(control.popleft())
                elif audio:
                    await conn.send_json(append_event(audio.popleft()))
                else:
                    wake.clear()
                    await wake.wait()
        except ProviderError as exc:
            await self._lost(exc)

    async def _read(self) -> None:
        conn = self.connection
        assert conn is not None
        handlers = self._handlers
        try:
            async for event in conn:
                kind = event["type"]
                if kind == AUDIO_DELTA:
                    self._on_audio_delta(event)
                    continue
                handler = handlers.get(kind)
                if handler is None:
                    continue
                try:
                    await handler(event)
                except asyncio.CancelledError:
                    raise
                except Exception:  # a bug or a malformed event must not end the conversation
                    logger.exception("handling the realtime event %s failed", kind)
            raise RealtimeError("the realtime API closed the connection")
        except ProviderError as exc:
            await self._lost(exc)

    async def _lost(self, exc: BaseException) -> None:
        if self.closed or self._lost_reported:
            return
        self._lost_reported = True
        logger.warning("realtime connection lost: %s", exc)
        await self.emit(Error(self.session_id, code="realtime_dropped", message=str(exc), recoverable=False))
        await self.close("realtime connection dropped")
