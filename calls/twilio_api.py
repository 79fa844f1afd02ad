"""Twilio's REST Calls API, the second telephony provider's client (httpx).

The views and the media stream use exactly this surface: place a call whose TwiML and status
callbacks are our webhooks, hang it up, give it new TwiML (a transfer's ``<Dial>``). Every
failure becomes :class:`calls.acs.TelephonyError` with Twilio's HTTP status (None when it could
not be reached) and a message that never carries the auth token: the views treat both providers'
failures alike. A client is made per request (calls are placed rarely; no connection is then
bound to a loop that may be gone).

Which provider places outbound calls: :func:`calls.provider.telephony_provider`. This client exists
whenever Twilio's credentials are set: Twilio's own calls (answered through the voice webhook) are
hung up and transferred through it whatever places the outbound ones.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import httpx
from django.conf import settings

from calls.acs import CallStarted, TelephonyError
from calls.provider import telephony_provider

__all__ = [
    "TwilioClient",
    "readiness_check",
    "reset_twilio_client",
    "set_twilio_client",
]

logger = logging.getLogger("calls.twilio")

API_VERSION = "2010-04-01"
STATUS_EVENTS = ("initiated", "ringing", "answered", "completed")
_MAX_DETAIL = 200


class TwilioClient:
    """Twilio's Calls API for one account, with HTTP basic auth (account SID, auth token)."""

    def __init__(
        self,
        account_sid: str,
        auth_token: str,
        *,
        api_base: str = "https://api.twilio.com",
        source_number: str | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        self.account_sid = account_sid
        self._auth_token = auth_token
        self.api_base = api_base.rstrip("/")
        self.source_number = source_number
        self.timeout_s = timeout_s

    def __repr__(self) -> str:  # never show the token
        return f"TwilioClient({self.account_sid!r}, {self.api_base!r})"

    def _calls_url(self, call_sid: str | None = None) -> str:
        tail = f"/{call_sid}.json" if call_sid else ".json"
        return f"{self.api_base}/{API_VERSION}/Accounts/{self.account_sid}/Calls{tail}"

    async def _post(self, what: str, url: str, data: dict[str, Any]) -> dict[str, Any]:
        """POST a form; the JSON answer, or :class:`TelephonyError`."""
        try:
            async with httpx.AsyncClient(
                auth=(self.account_sid, self._auth_token), timeout=self.timeout_s
            ) as http:
                response = await http.post(url, data=data, headers={"Accept": "application/json"})
        except httpx.TimeoutException:
            raise TelephonyError(f"Twilio unreachable: {what} timed out after {self.timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise TelephonyError(f"Twilio unreachable: {type(exc).__name__}") from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400:
            raise TelephonyError(
                f"Twilio refused {what} ({response.status_code}): {self._detail(body, response)}",
                response.status_code,
            )
        if not isinstance(body, dict):
            raise TelephonyError(f"Twilio answered {what} without a JSON object", response.status_code)
        return body

    def _detail(self, body: Any, response: httpx.Response) -> str:
        """Twilio's ``{code, message}`` error body, else the HTTP reason; the token never shows."""
        if isinstance(body, dict) and body.get("message"):
            text = f"{body.get('code')}: {body['message']}" if body.get("code") else str(body["message"])
        else:
            text = response.reason_phrase or "error"
        text = " ".join(text.split()).replace(self._auth_token, "***")
        return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 3] + "..."

    async def create_call(self, phone_number: str, *, twiml_url: str, status_url: str) -> CallStarted:
        """Call ``phone_number`` from our number; Twilio fetches ``twiml_url`` when it answers and
        reports the call's progress to ``status_url``."""
        if not self.source_number:
            raise TelephonyError("TWILIO_PHONE_NUMBER is not set: no caller id for outbound calls")
        body = await self._post(
            "the call",
            self._calls_url(),
            {
                "To": phone_number,
                "From": self.source_number,
                "Url": twiml_url,
                "Method": "POST",
                "StatusCallback": status_url,
                "StatusCallbackMethod": "POST",
                "StatusCallbackEvent": list(STATUS_EVENTS),
            },
        )
        sid = body.get("sid")
        if not isinstance(sid, str) or not sid:
            raise TelephonyError("Twilio returned no call SID", 502)
        return CallStarted(connection_id=sid, server_call_id=None, state=body.get("status"))

    async def hang_up(self, call_sid: str) -> None:
        """End the call; a 404 (unknown call) surfaces as status 404."""
        await self._post("the hang-up", self._calls_url(call_sid), {"Status": "completed"})

    async def update_twiml(self, call_sid: str, twiml: str) -> None:
        """The call leaves its current TwiML (our stream) for ``twiml`` (a transfer's ``<Dial>``)."""
        await self._post("the call update", self._calls_url(call_sid), {"Twiml": twiml})

    async def close(self) -> None:
        """Nothing is held between requests."""


# --- the process's client -------------------------------------------------------------------------
_lock = threading.Lock()
_injected: TwilioClient | None = None
_has_injected = False


def twilio_client() -> TwilioClient | None:
    """The client built from ``TWILIO_*`` (whether or not Twilio places this deployment's outbound
    calls: its own calls are hung up and transferred through it), else None."""
    with _lock:
        if _has_injected:
            return _injected
    cfg = settings.CONFIG
    if not cfg.get("TWILIO_ACCOUNT_SID") or not cfg.get("TWILIO_AUTH_TOKEN"):
        return None
    return TwilioClient(
        cfg.TWILIO_ACCOUNT_SID,
        cfg.TWILIO_AUTH_TOKEN,
        api_base=cfg.TWILIO_API_BASE,
        source_number=cfg.TWILIO_PHONE_NUMBER,
    )


def set_twilio_client(client: TwilioClient | None) -> None:
    """Make :func:`twilio_client` return ``client`` (None = "not configured") until reset."""
    global _injected, _has_injected
    with _lock:
        _injected, _has_injected = client, True


def reset_twilio_client() -> None:
    global _injected, _has_injected
    with _lock:
        _injected, _has_injected = None, False


async def readiness_check() -> tuple[str, str]:
    """Configuration-only readiness of whichever provider is chosen (no network)."""
    from calls import acs

    provider = telephony_provider()
    if provider != "twilio":
        return await acs.readiness_check()
    cfg = settings.CONFIG
    if not cfg.BASE_URL:
        return "unhealthy", "Twilio: BASE_URL not set (webhook and stream URLs cannot be built or verified)"
    if not cfg.TWILIO_PHONE_NUMBER:
        return (
            "healthy",
            f"Twilio account {cfg.TWILIO_ACCOUNT_SID[:8]}… configured (answers calls; no caller id)",
        )
    return "healthy", f"Twilio account {cfg.TWILIO_ACCOUNT_SID[:8]}… configured"
