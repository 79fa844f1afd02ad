"""The telephony provider's Call Automation client (Azure Communication Services).

INTERFACE FIXED BY THE LEAD; implementation in progress. Callers (``calls/telephony_views.py``,
``calls/media.py``) use exactly this surface.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CallStarted", "TelephonyClient", "TelephonyError", "telephony_client"]


class TelephonyError(Exception):
    """The provider refused or could not be reached. ``status`` is its HTTP status (None when it
    could not be reached); the message is safe to show (no secrets)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class CallStarted:
    connection_id: str
    server_call_id: str | None
    state: str | None  # the provider's callConnectionState, e.g. "connecting"


class TelephonyClient:
    """Async wrapper of ``azure.communication.callautomation.aio.CallAutomationClient``."""

    async def create_call(
        self,
        phone_number: str,
        *,
        callback_url: str,
        media_url: str,
        audio_format: str,
        operation_context: str | None = None,
    ) -> CallStarted:
        raise NotImplementedError

    async def answer_call(
        self,
        incoming_call_context: str,
        *,
        callback_url: str,
        media_url: str,
        audio_format: str,
        operation_context: str | None = None,
    ) -> CallStarted:
        raise NotImplementedError

    async def hang_up(self, connection_id: str) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


def telephony_client() -> TelephonyClient | None:
    """The process's client built from ``TELEPHONY_ENDPOINT`` (+ ``TELEPHONY_ACCESS_KEY`` or managed
    identity) and ``TELEPHONY_PHONE_NUMBER``; None when telephony is not configured."""
    raise NotImplementedError
