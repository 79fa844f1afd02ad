"""The realtime connection both dialects share: JSON events out, normalised dicts in, and opening.

:class:`Connection` holds what does not depend on the service (encoding, decoding, error
wrapping, closing once, keeping secrets out of messages); a dialect subclass supplies its
``session.update`` shape, its event renames and its SDK's socket (:mod:`.voicelive`,
:mod:`.openai_realtime`). :func:`enter` and :func:`configured` open a connection the same way for
both: within the connect timeout, failures as :class:`RealtimeError`, never leaked half-open.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any, TypeVar

from voiceagent.llm.realtime.session import RealtimeError, SessionConfig

logger = logging.getLogger(__name__)

__all__ = ["Connection", "configured", "enter", "scrub", "session_tools", "turn_detection"]

_BEARER_RE = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+")
_MAX_MESSAGE = 200

ConnectionT = TypeVar("ConnectionT", bound="Connection")


def scrub(exc: BaseException | str, secrets: tuple[str, ...]) -> str:
    """``exc`` as a message of at most 200 characters, with the secrets and bearer tokens masked."""
    text = str(exc) or type(exc).__name__
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = _BEARER_RE.sub(r"\1***", text)
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


class Connection:
    """One realtime WebSocket: raw JSON out, normalised dicts in."""

    provider = "realtime"
    label = "realtime API"

    def __init__(self, secrets: tuple[str, ...]) -> None:
        self._secrets = secrets
        self._closing = False
        self.voice_locked = False  # OpenAI: the voice cannot change once audio was produced

    # --- the dialect ----------------------------------------------------------------------------
    def session_event(self, session: SessionConfig) -> dict[str, Any]:
        raise NotImplementedError

    def _outgoing(self, event: Mapping[str, Any]) -> Mapping[str, Any]:
        return event

    def _normalise(self, event: dict[str, Any]) -> dict[str, Any]:
        return event

    # --- transport (per SDK) -----------------------------------------------------------------------
    async def _send_text(self, text: str) -> None:
        raise NotImplementedError

    async def _recv_raw(self) -> bytes | str | None:
        """The next message; None when the connection closed."""
        raise NotImplementedError

    async def _close(self) -> None:
        raise NotImplementedError

    # --- RealtimeConnection -------------------------------------------------------------------------
    async def send(self, event: Mapping[str, Any]) -> None:
        await self.send_json(json.dumps(self._outgoing(event)))

    async def send_json(self, text: str) -> None:
        """A client event already encoded as JSON (the audio path builds its appends itself)."""
        try:
            await self._send_text(text)
        except RealtimeError:
            raise
        except Exception as exc:
            raise RealtimeError(f"{self.label}: send failed ({self.scrub(exc)})") from None

    async def update_session(self, session: SessionConfig) -> None:
        await self.send(self.session_event(session))

    async def recv(self) -> dict[str, Any] | None:
        """The next server event (normalised), or None once the connection is closed."""
        while True:
            try:
                raw = await self._recv_raw()
            except RealtimeError:
                raise
            except Exception as exc:
                if self._closing:
                    return None
                raise RealtimeError(f"{self.label}: connection lost ({self.scrub(exc)})") from None
            if raw is None:
                return None
            if not raw:
                continue
            try:
                event = json.loads(raw)
            except ValueError:
                logger.warning("%s sent a message that is not JSON; ignored", self.label)
                continue
            if isinstance(event, dict) and isinstance(event.get("type"), str):
                return self._normalise(event)

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            event = await self.recv()
            if event is None:
                return
            yield event

    async def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        try:
            await self._close()
        except Exception as exc:  # closing a broken socket
            logger.debug("%s: close failed: %s", self.label, self.scrub(exc))

    def scrub(self, exc: BaseException | str) -> str:
        """``exc`` as a short message without this connection's secrets."""
        return scrub(exc, self._secrets)


def session_tools(session: SessionConfig) -> list[dict]:
    """The session's tools as fresh dicts for a ``session.update`` body."""
    return [dict(t) for t in session.tools]


def turn_detection(session: SessionConfig, kind: str = "server_vad", **extra: Any) -> dict[str, Any]:
    """The server VAD settings both dialects share (``extra`` adds a dialect's own keys).

    ``silence_duration_ms`` is the shortest end of turn; ``create_response`` and
    ``interrupt_response`` are off unless the session lets the service take both decisions
    (:attr:`SessionConfig.auto_respond`): the live engine judges speech over the agent itself.
    """
    return {
        "type": kind,
        "threshold": session.vad_threshold,
        "prefix_padding_ms": session.prefix_padding_ms,
        "silence_duration_ms": int(session.silence_duration_ms),
        "create_response": session.auto_respond,
        "interrupt_response": session.auto_respond,
        **extra,
    }


def _status_of(exc: BaseException) -> int | None:
    """The HTTP status of a refused WebSocket upgrade, whichever library raised it."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        response = getattr(exc, "response", None)
        for value in (getattr(exc, "status", None), getattr(response, "status_code", None)):
            if isinstance(value, int):
                return value
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return None


def _connect_error(label: str, exc: BaseException, secrets: tuple[str, ...]) -> RealtimeError:
    status = _status_of(exc)
    if status in (401, 403):
        return RealtimeError(f"{label} rejected the credentials (HTTP {status})", retryable=False)
    if status is not None and 400 <= status < 500 and status not in (408, 429):
        return RealtimeError(f"{label} refused the connection (HTTP {status})", retryable=False)
    detail = f"HTTP {status}" if status is not None else scrub(exc, secrets)
    return RealtimeError(f"{label}: connection failed ({detail})")


async def enter(label: str, opening: Awaitable[Any], timeout: float, secrets: tuple[str, ...]) -> Any:
    """Await an SDK's connection opening within ``timeout``; failures as :class:`RealtimeError`."""
    try:
        async with asyncio.timeout(timeout):
            return await opening
    except TimeoutError:
        raise RealtimeError(f"{label} did not accept the connection within {timeout:g}s") from None
    except Exception as exc:
        raise _connect_error(label, exc, secrets) from None


async def configured(conn: ConnectionT, session: SessionConfig) -> ConnectionT:
    """Send the first ``session.update``; a connection that cannot take it is closed, not leaked."""
    try:
        await conn.update_session(session)
    except BaseException:
        await conn.close()
        raise
    return conn
