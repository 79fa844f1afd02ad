"""A local Twilio for tests: the REST Calls API, the webhooks it calls, the Media Streams it opens.

The service's ``TWILIO_API_BASE`` points here; it speaks Twilio's wire, not our code's:

* ``POST /2010-04-01/Accounts/{AccountSid}/Calls.json`` (HTTP basic auth with the account SID
  and auth token, else 401 ``{code: 20003}``; form ``To``, ``From``, ``Url``, ``StatusCallback``,
  ``StatusCallbackEvent``...) -> 201 the call (``sid`` CA..., ``status: queued``); then, as a real
  call would, the ``initiated`` and ``ringing`` status callbacks. :meth:`TwilioPeer.answer` is the
  callee picking up: the ``Url`` is fetched (a signed form POST, ``Direction=outbound-api``), its
  TwiML kept, and ``in-progress`` reported.
* ``POST .../Calls/{CallSid}.json``: ``Status=completed`` ends the call (``completed`` reported;
  an open stream gets ``stop`` and is closed); ``Twiml=...`` replaces its TwiML (a ``<Dial>``:
  the stream gets ``stop`` and is closed, as Twilio leaves ``<Connect>``); :meth:`TwilioPeer.
  dial_result` is how that dial ended: its ``action`` is posted and the TwiML it answers kept.
  Unknown calls 404 ``{code: 20404}``.
* :meth:`TwilioPeer.incoming_call` is a caller dialling our number: the voice webhook is POSTed
  signed and its TwiML kept.
* :meth:`TwilioPeer.stream` opens the Media Stream the call's TwiML names, as Twilio: signed
  upgrade, ``connected``, ``start`` with the TwiML's ``<Parameter>``s; it returns the
  :class:`~twilio_media_client.TwilioMediaClient` for the test to talk through.

Every webhook the peer sends is signed (:func:`~twilio_media_client.sign`) with :attr:`auth_token`
over the URL it posts to; :meth:`signed_post` lets a test forge or omit the signature.
"""

from __future__ import annotations

import asyncio
import base64
import os
import threading
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from threaded_server import ThreadedAsgiServer
from twilio_media_client import TwilioMediaClient, sign, twilio_sid

__all__ = ["TwilioPeer", "twilio_env"]

API = "/2010-04-01/Accounts/{account}/Calls"


@dataclass
class PeerCall:
    sid: str
    to: str
    from_: str
    direction: str  # inbound | outbound-api
    url: str = ""  # the voice webhook
    status_callback: str = ""
    status: str = "queued"
    twiml: str = ""  # the TwiML our webhook answered (and any update)
    updates: list[str] = field(default_factory=list)  # Twiml= bodies of call updates
    statuses_sent: list[tuple[str, int]] = field(default_factory=list)  # (CallStatus, our HTTP status)
    stream: tuple[asyncio.AbstractEventLoop, TwilioMediaClient] | None = None


def _error(status: int, code: int, message: str) -> JSONResponse:
    return JSONResponse({"code": code, "message": message, "status": status}, status_code=status)


class TwilioPeer(ThreadedAsgiServer):
    """Start with ``with TwilioPeer() as peer:``."""

    label = "Twilio peer"

    def __init__(self) -> None:
        super().__init__()
        self.account_sid = twilio_sid("AC")
        self.auth_token = os.urandom(16).hex()
        self.calls: dict[str, PeerCall] = {}
        self.requests: list[dict[str, Any]] = []  # every REST request: method, path, form, authorized
        self._fail: list[tuple[int, int, str]] = []
        self._lock = threading.Lock()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()
            self.requests.clear()
            self._fail.clear()

    def fail_next(self, status: int, code: int = 21210, message: str = "Scripted failure") -> None:
        """The next authorized REST request answers ``status`` with Twilio's error body."""
        with self._lock:
            self._fail.append((status, code, message))

    # --- webhooks we send ---------------------------------------------------------------------------
    def signed_post(
        self, url: str, form: dict[str, Any], *, signature: str | None = "sign", timeout: float = 15.0
    ) -> httpx.Response:
        """POST ``form`` to ``url`` as Twilio does; ``signature=None`` sends none, any other string
        but ``"sign"`` is sent as it is (a forgery)."""
        headers = {"User-Agent": "TwilioProxy/1.1"}
        if signature is not None:
            headers["X-Twilio-Signature"] = (
                sign(self.auth_token, url, form) if signature == "sign" else signature
            )
        return httpx.post(url, data=form, headers=headers, timeout=timeout)

    def _form(self, call: PeerCall, status: str) -> dict[str, str]:
        return {
            "AccountSid": self.account_sid,
            "ApiVersion": "2010-04-01",
            "CallSid": call.sid,
            "CallStatus": status,
            "Direction": call.direction,
            "From": call.from_,
            "To": call.to,
            "Called": call.to,
            "Caller": call.from_,
        }

    def _fetch_twiml(self, call: PeerCall, status: str) -> None:
        response = self.signed_post(call.url, self._form(call, status))
        if response.status_code != 200:
            raise AssertionError(f"voice webhook answered {response.status_code}: {response.text[:300]}")
        call.twiml = response.text

    def report(self, call_sid: str, status: str) -> int:
        """Post ``status`` to the call's StatusCallback (signed); our HTTP status (0: none set)."""
        call = self.calls[call_sid]
        call.status = status
        if not call.status_callback:
            return 0
        response = self.signed_post(call.status_callback, self._form(call, status))
        call.statuses_sent.append((status, response.status_code))
        return response.status_code

    def incoming_call(
        self, voice_url: str, caller: str = "+15550100200", called: str = "+15550001111"
    ) -> str:
        """A caller dials our number: the voice webhook's TwiML is fetched (signed); the call SID."""
        call = PeerCall(twilio_sid("CA"), called, caller, "inbound", url=voice_url, status="ringing")
        with self._lock:
            self.calls[call.sid] = call
        self._fetch_twiml(call, "ringing")
        call.status = "in-progress"
        return call.sid

    def dial_result(self, call_sid: str, status: str) -> str:
        """The ``<Dial>`` of the call's TwiML ended with ``status`` (``completed``, ``no-answer``,
        ``busy`` ...): Twilio posts its ``action`` (signed) and follows the TwiML it gets (kept)."""
        call = self.calls[call_sid]
        dial = ET.fromstring(call.twiml).find("./Dial")
        if dial is None or not dial.get("action"):
            raise AssertionError(f"no <Dial action=...> in {call.twiml!r}")
        form = {**self._form(call, "in-progress"), "DialCallStatus": status, "DialCallSid": twilio_sid("CA")}
        response = self.signed_post(dial.get("action"), form)
        if response.status_code != 200:
            raise AssertionError(f"the dial action answered {response.status_code}: {response.text[:300]}")
        call.twiml = response.text
        if ET.fromstring(response.text).find("./Hangup") is not None:
            call.status = "completed"
        return response.text

    def answer(self, call_sid: str) -> None:
        """The callee of an outbound call picks up: TwiML fetched, then ``in-progress`` reported."""
        call = self.calls[call_sid]
        self._fetch_twiml(call, "in-progress")
        self.report(call_sid, "in-progress")

    # --- the Media Stream ---------------------------------------------------------------------------
    def stream_target(self, call_sid: str) -> tuple[str, dict[str, str]]:
        """(stream URL, custom parameters) of the call's ``<Connect><Stream>``."""
        root = ET.fromstring(self.calls[call_sid].twiml)
        stream = root.find("./Connect/Stream")
        if stream is None:
            raise AssertionError(f"no <Connect><Stream> in {self.calls[call_sid].twiml!r}")
        parameters = {p.get("name"): p.get("value") for p in stream.findall("Parameter")}
        return stream.get("url", ""), parameters

    async def stream(
        self, call_sid: str, *, query: str = "", connect_to: str | None = None
    ) -> TwilioMediaClient:
        """Open the call's Media Stream as Twilio: signed upgrade, ``connected``, ``start``.
        ``query`` is added to the TwiML's URL (and signed); ``connect_to`` is where to connect when
        the public URL is not reachable from here (the server behind its proxy)."""
        import websockets
        from acs_media_client import over_websockets

        url, parameters = self.stream_target(call_sid)
        public = url + (f"?{query}" if query else "")
        address = (connect_to or url) + (f"?{query}" if query else "")
        headers = {"X-Twilio-Signature": sign(self.auth_token, public)}
        ws = await websockets.connect(address, additional_headers=headers, max_size=None)
        client = TwilioMediaClient(over_websockets(ws), account_sid=self.account_sid, call_sid=call_sid)
        client.ws = ws  # type: ignore[attr-defined]
        self.calls[call_sid].stream = (asyncio.get_running_loop(), client)
        await client.begin(parameters)
        return client

    def _leave_stream(self, call: PeerCall) -> None:
        """Twilio leaves the call's ``<Connect><Stream>``: ``stop``, then the socket closes."""
        if call.stream is None:
            return
        loop, client = call.stream
        call.stream = None

        async def leave() -> None:
            try:
                await client.stop()
                await client.ws.close()  # type: ignore[attr-defined]
            except Exception:  # the service closed it first
                pass

        asyncio.run_coroutine_threadsafe(leave(), loop)

    # --- the REST API -------------------------------------------------------------------------------
    def _app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/2010-04-01/Accounts/{account}/Calls.json", self._create, methods=["POST"]),
                Route("/2010-04-01/Accounts/{account}/Calls/{sid}.json", self._update, methods=["POST"]),
            ]
        )

    async def _admit(self, request: Request) -> tuple[dict[str, Any], JSONResponse | None]:
        form = await request.form()
        values: dict[str, Any] = {k: form.getlist(k) if len(form.getlist(k)) > 1 else form[k] for k in form}
        expected = "Basic " + base64.b64encode(f"{self.account_sid}:{self.auth_token}".encode()).decode()
        authorized = request.headers.get("authorization") == expected
        with self._lock:
            self.requests.append(
                {"method": request.method, "path": request.url.path, "form": values, "authorized": authorized}
            )
        if not authorized or request.path_params["account"] != self.account_sid:
            return values, _error(401, 20003, "Authenticate")
        with self._lock:
            failure = self._fail.pop(0) if self._fail else None
        if failure is not None:
            return values, _error(*failure)
        return values, None

    async def _create(self, request: Request) -> JSONResponse:
        form, early = await self._admit(request)
        if early is not None:
            return early
        for name in ("To", "From", "Url"):
            if not form.get(name):
                return _error(400, 21201 if name == "To" else 21205, f"Missing required parameter {name}")
        call = PeerCall(
            twilio_sid("CA"),
            form["To"],
            form["From"],
            "outbound-api",
            form["Url"],
            form.get("StatusCallback", ""),
        )
        with self._lock:
            self.calls[call.sid] = call
        body = {
            "sid": call.sid,
            "account_sid": self.account_sid,
            "to": call.to,
            "from": call.from_,
            "status": "queued",
            "direction": "outbound-api",
            "api_version": "2010-04-01",
            "uri": f"{API.format(account=self.account_sid)}/{call.sid}.json",
        }
        ringing = BackgroundTask(self._ring, call.sid)
        return JSONResponse(body, status_code=201, background=ringing)

    def _ring(self, call_sid: str) -> None:
        for status in ("initiated", "ringing"):
            self.report(call_sid, status)

    async def _update(self, request: Request) -> JSONResponse:
        form, early = await self._admit(request)
        if early is not None:
            return early
        call = self.calls.get(request.path_params["sid"])
        if call is None or call.status in ("completed", "failed", "busy", "no-answer", "canceled"):
            return _error(404, 20404, "The requested resource was not found")
        ended = None
        if form.get("Twiml"):
            call.updates.append(form["Twiml"])
            call.twiml = form["Twiml"]
            self._leave_stream(call)
        elif form.get("Status") == "completed":
            call.status = "completed"
            self._leave_stream(call)
            ended = BackgroundTask(self.report, call.sid, "completed")  # after our answer, as Twilio
        else:
            return _error(400, 21220, "Invalid call update")
        return JSONResponse({"sid": call.sid, "status": call.status}, status_code=200, background=ended)


def twilio_env(peer: TwilioPeer, base_url: str, **extra: str) -> dict[str, str]:
    """The environment that points the service's telephony at ``peer`` (``BASE_URL``: the public URL
    the peer posts to and streams from)."""
    return {
        "TELEPHONY_PROVIDER": "twilio",
        "TWILIO_ACCOUNT_SID": peer.account_sid,
        "TWILIO_AUTH_TOKEN": peer.auth_token,
        "TWILIO_PHONE_NUMBER": "+15550001111",
        "TWILIO_API_BASE": peer.api_base,
        "BASE_URL": base_url,
        **extra,
    }
