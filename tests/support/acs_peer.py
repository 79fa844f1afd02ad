"""A local Azure Communication Services Call Automation REST server for tests.

The real ``azure-communication-callautomation`` SDK talks to it over real sockets
(``CallAutomationClient(peer.endpoint, AzureKeyCredential(peer.key))``), so the request bodies,
HMAC signing and error handling under test are the ones production uses. It runs uvicorn +
Starlette on 127.0.0.1 (a free port) in a background thread with its own event loop.

Routes (api-version ``2026-03-12`` is required on each):

* ``POST /calling/callConnections`` (create) -> 201 call connection properties, state
  ``connecting``; ``POST /calling/callConnections:answer`` -> 200 likewise.
* ``POST /calling/callConnections/{id}:terminate`` -> 204 (state becomes ``disconnected``); 404
  ``{"error": {"code": "8522", ...}}`` for unknown or already ended calls.
* ``GET /calling/callConnections/{id}`` -> 200 properties (404 as above).
* ``POST /calling/callConnections/{id}:transferToParticipant`` -> 202 ``{"operationContext"}``
  when the body names a ``targetParticipant`` (``rawId`` and a typed identifier), else 400; in
  :attr:`AcsPeer.transfers`. Its outcome is the test's to post: :meth:`AcsPeer.cloud_event`
  ``("CallTransferAccepted" | "CallTransferFailed", ...)`` with :func:`transfer_event_data`.
* ``POST /calling/callConnections/{id}:<action>`` (play, startMediaStreaming, ...) -> 202.

Every request must carry a valid ``HMAC-SHA256`` signature made with :attr:`AcsPeer.key` (the
string-to-sign of ``azure/communication/callautomation/_shared/policy.py``: ``VERB\\npath?query\\n
<x-ms-date>;<host>;<x-ms-content-sha256>``) and a body hash that matches; otherwise 401. Every
request is recorded (:attr:`AcsPeer.requests`). Scripting: :meth:`AcsPeer.fail_next`,
:meth:`AcsPeer.delay_next`; created calls live in :attr:`AcsPeer.calls`.

Webhook payload builders for tests of our endpoints: :func:`cloud_event` (callbacks),
:func:`incoming_call_event` and :func:`validation_event` (Event Grid).

Usage::

    with AcsPeer() as peer:
        client = TelephonyClient(peer.endpoint, access_key=peer.key, source_number="+15550001111")
        started = await client.create_call("+15551234567", callback_url=..., media_url=...,
                                           audio_format="pcm16KMono")
        assert peer.calls[started.connection_id]["callConnectionState"] == "connecting"
        body = [cloud_event("CallConnected", started.connection_id)]  # POST to /calls/callbacks
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import email.utils
import hashlib
import hmac
import json
import os
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from threaded_server import ThreadedAsgiServer

__all__ = [
    "API_VERSION",
    "EVENTGRID_NOTIFICATION_HEADERS",
    "EVENTGRID_VALIDATION_HEADERS",
    "AcsPeer",
    "RecordedRequest",
    "cloud_event",
    "incoming_call_event",
    "phone_identifier",
    "validation_event",
]

API_VERSION = "2026-03-12"
SIGNED_HEADERS = "x-ms-date;host;x-ms-content-sha256"
MAX_CLOCK_SKEW_S = 15 * 60
TOPIC = (
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/rg-test/providers/"
    "Microsoft.Communication/communicationServices/acs-peer"
)
# Event Grid sends this header with every delivery; webhooks may rely on it.
EVENTGRID_VALIDATION_HEADERS = {"aeg-event-type": "SubscriptionValidation"}
EVENTGRID_NOTIFICATION_HEADERS = {"aeg-event-type": "Notification"}


@dataclass
class RecordedRequest:
    method: str
    path: str  # decoded path, e.g. /calling/callConnections/abc:terminate
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: Any  # parsed JSON (None when empty)
    authorized: bool = False
    at: float = field(default_factory=time.monotonic)


@dataclass
class _Failure:
    status: int
    code: str
    message: str


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")


def phone_identifier(number: str) -> dict:
    """A PSTN CommunicationIdentifier as ACS serializes it."""
    return {"kind": "phoneNumber", "rawId": f"4:{number}", "phoneNumber": {"value": number}}


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


class AcsPeer(ThreadedAsgiServer):
    """Start with ``with AcsPeer() as peer:`` (or :meth:`start` / :meth:`stop`)."""

    label = "ACS peer"

    def __init__(self, key: str | None = None) -> None:
        super().__init__()
        self.key = key or base64.b64encode(os.urandom(32)).decode()
        self.requests: list[RecordedRequest] = []
        self.calls: dict[str, dict[str, Any]] = {}
        self.transfers: list[dict[str, Any]] = []  # transferToParticipant bodies, with "connection_id"
        self._by_repeatability: dict[str, str] = {}  # Repeatability-Request-ID -> call id
        self._failures: deque[_Failure] = deque()
        self._delays: deque[float] = deque()
        self._lock = threading.Lock()

    # --- scripting ---------------------------------------------------------------------------------
    def fail_next(self, status: int, code: str = "", message: str = "Scripted failure") -> AcsPeer:
        """The next authorized request answers ``status`` with an ACS error body."""
        with self._lock:
            self._failures.append(_Failure(status, code or str(status), message))
        return self

    def delay_next(self, seconds: float) -> AcsPeer:
        """The next authorized request waits ``seconds`` before answering."""
        with self._lock:
            self._delays.append(seconds)
        return self

    def set_state(self, connection_id: str, state: str) -> None:
        """Move a call to ``state`` (e.g. ``connected``), as if the far end acted."""
        with self._lock:
            self.calls[connection_id]["callConnectionState"] = state

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.calls.clear()
            self.transfers.clear()
            self._by_repeatability.clear()
            self._failures.clear()
            self._delays.clear()

    def requests_to(self, suffix: str, method: str = "POST") -> list[RecordedRequest]:
        """Recorded requests whose path ends with ``suffix`` (e.g. ``:terminate``)."""
        return [r for r in self.requests if r.method == method and r.path.endswith(suffix)]

    def cloud_event(self, kind: str, connection_id: str, **data: Any) -> dict:
        """:func:`cloud_event` with the server call and correlation ids of a call this peer made."""
        call = self.calls.get(connection_id, {})
        defaults = {k: call[k] for k in ("serverCallId", "correlationId") if k in call}
        return cloud_event(kind, connection_id, **{**defaults, **data})

    # --- addresses ---------------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- the ASGI app ------------------------------------------------------------------------------
    def _app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/calling/callConnections", self._create, methods=["POST"]),
                Route("/calling/callConnections:answer", self._answer, methods=["POST"]),
                Route("/calling/callConnections/{target}", self._connection, methods=["GET", "POST"]),
            ]
        )

    def _verify(self, request: Request, raw: bytes, headers: dict[str, str]) -> str | None:
        """None when the request is signed with our key exactly as ACS checks; else why not."""
        auth = headers.get("authorization", "")
        if not auth.startswith("HMAC-SHA256 "):
            return "missing HMAC-SHA256 authorization"
        params = dict(p.split("=", 1) for p in auth[len("HMAC-SHA256 ") :].split("&") if "=" in p)
        signed, signature = params.get("SignedHeaders", ""), params.get("Signature", "")
        if signed.lower() != SIGNED_HEADERS:
            return "unexpected SignedHeaders"
        content_hash = base64.b64encode(hashlib.sha256(raw).digest()).decode()
        if headers.get("x-ms-content-sha256") != content_hash:
            return "x-ms-content-sha256 does not match the body"
        try:
            sent = email.utils.parsedate_to_datetime(headers.get("x-ms-date", ""))
        except (TypeError, ValueError):
            return "bad x-ms-date"
        if abs((dt.datetime.now(dt.UTC) - sent).total_seconds()) > MAX_CLOCK_SKEW_S:
            return "x-ms-date outside the allowed clock skew"
        path_and_query = request.scope["raw_path"].decode("latin-1")
        if request.scope.get("query_string"):
            path_and_query += "?" + request.scope["query_string"].decode("latin-1")
        values = ";".join(headers.get(h, "") for h in signed.lower().split(";"))
        to_sign = f"{request.method.upper()}\n{path_and_query}\n{values}"
        expected = base64.b64encode(
            hmac.new(base64.b64decode(self.key), to_sign.encode(), hashlib.sha256).digest()
        ).decode()
        if not hmac.compare_digest(expected, signature):
            return "signature mismatch"
        return None

    async def _admit(self, request: Request) -> tuple[RecordedRequest, Response | None]:
        """Record, authenticate, then apply scripted delay/failure: (record, early response)."""
        raw = await request.body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k.lower(): v for k, v in request.headers.items()}
        record = RecordedRequest(
            method=request.method,
            path=request.url.path,
            query=dict(request.query_params),
            headers=headers,
            body=body,
        )
        with self._lock:
            self.requests.append(record)
        problem = self._verify(request, raw, headers)
        if problem is not None:
            return record, _error(401, "Denied", f"Denied by the resource provider: {problem}.")
        record.authorized = True
        if record.query.get("api-version") != API_VERSION:
            return record, _error(400, "BadRequest", f"api-version must be {API_VERSION}")
        with self._lock:
            delay = self._delays.popleft() if self._delays else 0.0
            failure = self._failures.popleft() if self._failures else None
        if delay:
            await asyncio.sleep(delay)
        if failure is not None:
            return record, _error(failure.status, failure.code, failure.message)
        return record, None

    def _new_call(self, record: RecordedRequest, body: dict, **extra: Any) -> dict[str, Any]:
        """A new call, or the same one for a retried request (ACS dedupes on Repeatability-Request-ID)."""
        repeat_id = record.headers.get("repeatability-request-id")
        with self._lock:
            if repeat_id and repeat_id in self._by_repeatability:
                return self.calls[self._by_repeatability[repeat_id]]
        connection_id = str(uuid.uuid4())
        call = {
            "callConnectionId": connection_id,
            "serverCallId": base64.urlsafe_b64encode(os.urandom(24)).decode().rstrip("="),
            "callConnectionState": "connecting",
            "callbackUri": body.get("callbackUri"),
            "correlationId": str(uuid.uuid4()),
            **extra,
        }
        with self._lock:
            self.calls[connection_id] = call
            if repeat_id:
                self._by_repeatability[repeat_id] = connection_id
        return call

    async def _create(self, request: Request) -> Response:
        record, early = await self._admit(request)
        if early is not None:
            return early
        body = record.body if isinstance(record.body, dict) else {}
        if not body.get("targets") or not body.get("callbackUri"):
            return _error(400, "BadRequest", "targets and callbackUri are required")
        extra: dict[str, Any] = {"targets": body["targets"]}
        if body.get("sourceCallerIdNumber"):
            number = body["sourceCallerIdNumber"]["value"]
            extra["sourceCallerIdNumber"] = {"value": number}
            extra["source"] = phone_identifier(number)
        if body.get("mediaStreamingOptions"):
            extra["mediaStreamingSubscription"] = {
                "id": str(uuid.uuid4()),
                "state": "inactive",
                "subscribedContentTypes": ["audio"],
            }
        return JSONResponse(self._new_call(record, body, **extra), status_code=201)

    async def _answer(self, request: Request) -> Response:
        record, early = await self._admit(request)
        if early is not None:
            return early
        body = record.body if isinstance(record.body, dict) else {}
        if not body.get("incomingCallContext") or not body.get("callbackUri"):
            return _error(400, "BadRequest", "incomingCallContext and callbackUri are required")
        call = self._new_call(record, body, incomingCallContext=body["incomingCallContext"])
        return JSONResponse({k: v for k, v in call.items() if k != "incomingCallContext"}, status_code=200)

    async def _connection(self, request: Request) -> Response:
        record, early = await self._admit(request)
        if early is not None:
            return early
        target = request.path_params["target"]
        connection_id, _, action = target.partition(":")
        with self._lock:
            call = self.calls.get(connection_id)
            live = call is not None and call["callConnectionState"] != "disconnected"
        if not live:
            return _error(404, "8522", "Call not found")
        if request.method == "GET":
            if action:
                return _error(404, "NotFound", "Resource not found")
            return JSONResponse({k: v for k, v in call.items() if k != "incomingCallContext"})
        if action == "terminate":
            self.set_state(connection_id, "disconnected")
            return Response(status_code=204)
        if not action:
            return _error(405, "MethodNotAllowed", "POST needs an action")
        if action == "transferToParticipant":
            return self._transfer(connection_id, record.body if isinstance(record.body, dict) else {})
        return Response(status_code=202)

    def _transfer(self, connection_id: str, body: dict[str, Any]) -> Response:
        target = body.get("targetParticipant")
        typed = ("phoneNumber", "communicationUser", "microsoftTeamsUser")
        if not isinstance(target, dict) or not target.get("rawId") or not any(k in target for k in typed):
            return _error(400, "BadRequest", "targetParticipant with rawId and its identifier is required")
        with self._lock:
            self.transfers.append({**body, "connection_id": connection_id})
        return JSONResponse({"operationContext": body.get("operationContext")}, status_code=202)


# --------------------------------------------------------------------------------------------------
# Webhook payloads (what ACS and Event Grid post to us)
# --------------------------------------------------------------------------------------------------


def transfer_event_data(
    target: dict, operation_context: str | None, accepted: bool = True, caller: str = "+15551234567"
) -> dict:
    """The ``data`` of a ``CallTransferAccepted`` (the target and the transferee, as Azure documents
    them) or ``CallTransferFailed`` (a 4xx result) callback, for :meth:`AcsPeer.cloud_event`."""
    if accepted:
        return {
            "operationContext": operation_context,
            "resultInformation": {"code": 202, "subCode": 0, "message": "Transfer accepted."},
            "transferTarget": target,
            "transferee": phone_identifier(caller),
        }
    result = {"code": 408, "subCode": 8519, "message": "Transfer target did not answer."}
    return {"operationContext": operation_context, "resultInformation": result}


def cloud_event(kind: str, connection_id: str, **data: Any) -> dict:
    """One CloudEvents 1.0 Call Automation callback, e.g. ``cloud_event("CallConnected", cid)``.

    ``data`` keys override or extend the defaults (``serverCallId``, ``correlationId``,
    ``operationContext``, ``resultInformation``, ``toneInfo`` ...). POST ``[event, ...]``.
    """
    event_type = kind if kind.startswith("Microsoft.") else f"Microsoft.Communication.{kind}"
    source = f"calling/callConnections/{connection_id}"
    payload = {
        "version": API_VERSION,
        "callConnectionId": connection_id,
        "serverCallId": f"server-{connection_id}",
        "correlationId": str(uuid.uuid4()),
        "operationContext": None,
        "resultInformation": {"code": 200, "subCode": 0, "message": "Action completed successfully."},
        "publicEventType": event_type,
        **data,
    }
    return {
        "id": str(uuid.uuid4()),
        "source": source,
        "type": event_type,
        "data": payload,
        "time": _now_iso(),
        "specversion": "1.0",
        "datacontenttype": "application/json",
        "subject": source,
    }


def incoming_call_event(
    from_number: str,
    to_number: str,
    context: str | None = None,
    *,
    caller_display_name: str = "",
    server_call_id: str | None = None,
) -> dict:
    """One Event Grid ``Microsoft.Communication.IncomingCall`` event (POST ``[event]`` with
    :data:`EVENTGRID_NOTIFICATION_HEADERS`); ``data.incomingCallContext`` is what answer needs."""
    return {
        "id": str(uuid.uuid4()),
        "topic": TOPIC,
        "subject": f"/phonenumber/{to_number.lstrip('+')}",
        "data": {
            "to": phone_identifier(to_number),
            "from": phone_identifier(from_number),
            "serverCallId": server_call_id or base64.urlsafe_b64encode(os.urandom(24)).decode().rstrip("="),
            "callerDisplayName": caller_display_name,
            "customContext": {"sipHeaders": {}, "voipHeaders": {}},
            "incomingCallContext": context or f"ctx-{uuid.uuid4().hex}",
            "correlationId": str(uuid.uuid4()),
        },
        "eventType": "Microsoft.Communication.IncomingCall",
        "eventTime": _now_iso(),
        "metadataVersion": "1",
        "dataVersion": "1.0",
    }


def validation_event(code: str) -> dict:
    """One Event Grid subscription validation event (POST ``[event]`` with
    :data:`EVENTGRID_VALIDATION_HEADERS`); the webhook must echo ``code``."""
    return {
        "id": str(uuid.uuid4()),
        "topic": TOPIC,
        "subject": "",
        "data": {
            "validationCode": code,
            "validationUrl": f"https://rp-eastus.eventgrid.azure.net/eventsubscriptions/acs/validate?code={code}",
        },
        "eventType": "Microsoft.EventGrid.SubscriptionValidationEvent",
        "eventTime": _now_iso(),
        "metadataVersion": "1",
        "dataVersion": "2",
    }


# --- what the telephony tests configure ---------------------------------------------------------------
TEST_BASE_URL = "https://voice.example.com"
TEST_CALLBACK_URL = f"{TEST_BASE_URL}/api/v1/calls/callbacks"
TEST_MEDIA_URL = "wss://voice.example.com/api/v1/media/stream"
TEST_CALLER_ID = "+15550001111"


def telephony_env(peer: AcsPeer, **extra: str) -> dict[str, str]:
    """The environment that points the service's telephony at ``peer``, as production sets it."""
    return {
        "TELEPHONY_ENDPOINT": peer.endpoint,
        "TELEPHONY_ACCESS_KEY": peer.key,
        "TELEPHONY_PHONE_NUMBER": TEST_CALLER_ID,
        "BASE_URL": TEST_BASE_URL,
        **extra,
    }
