"""REST for phone calls: place, list and end calls; the provider's two webhooks.

``/calls/initiate``, ``/calls/`` and ``/calls/terminate`` are the service's own endpoints (API key
in production). ``/calls/answer`` (Event Grid) and ``/calls/callbacks`` (Call Automation
CloudEvents) are called by the telephony provider: anonymous, so they validate the body's schema
strictly and answer anything unexpected with 400 instead of acting on it.

Views are sync like the rest of the REST API; the async telephony client and the call map run
through ``async_to_sync`` (on the server's event loop under ASGI).
"""

from __future__ import annotations

import hashlib
import logging
import re
from functools import partial
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents_app.catalog import catalog
from calls import acs, callmap, twilio_views
from calls import telephony_serializers as s
from calls.call_setup import connect_call, provider_error
from calls.callbacks import process_events
from calls.models import STATUSES, Call
from calls.provider import telephony_provider
from voiceagent.errors import ApiError

logger = logging.getLogger("calls.telephony")

DEFAULT_SCENARIO = "default"
CALLBACK_PATH = "/api/v1/calls/callbacks"
MEDIA_PATH = "/api/v1/media/stream"
MAX_PAGE_SIZE = 100
MAX_PAGE = 1_000_000
MAX_EVENTS = 100
ANSWERED_KEY = "calls:answered:{}"  # sha256 of the incoming call context -> connection id
ANSWERED_TTL_S = 3600  # Event Grid retries for up to a day, but an unanswered call is long gone
VALIDATION_EVENT = "Microsoft.EventGrid.SubscriptionValidationEvent"
INCOMING_CALL_EVENT = "Microsoft.Communication.IncomingCall"
TAGS = ["calls"]
ERRORS = {400: s.CallErrorSerializer, 401: s.CallErrorSerializer}
PROVIDER_ERRORS = {502: s.CallErrorSerializer, 503: s.CallErrorSerializer}
_DIGITS = re.compile(r"^\+?[0-9]{1,20}\Z")


# --- helpers ------------------------------------------------------------------------------------


def _validated(serializer_class, data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _client() -> acs.TelephonyClient:
    client = acs.telephony_client()
    if client is None:
        raise ApiError("Telephony is not configured: set TELEPHONY_ENDPOINT (or TWILIO_ACCOUNT_SID).", 503)
    return client


def _urls() -> tuple[str, str]:
    """(callback URL, media WebSocket URL) built from ``BASE_URL``."""
    base = settings.CONFIG.BASE_URL
    if not base:
        raise ApiError("Telephony is not configured: set BASE_URL (the public URL of this service).", 503)
    parts = urlsplit(base.rstrip("/"))
    scheme = "wss" if parts.scheme == "https" else "ws"
    callback = urlunsplit((parts.scheme, parts.netloc, parts.path + CALLBACK_PATH, "", ""))
    media = urlunsplit((scheme, parts.netloc, parts.path + MEDIA_PATH, "", ""))
    return callback, media


def _iso(value) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def call_record(call: Call) -> dict[str, Any]:
    """A call as the REST API shows it (CONTRACTS "Calls and media", C)."""
    return {
        "connection_id": call.connection_id,
        "direction": call.direction,
        "phone_number": call.phone_number,
        "scenario": call.scenario,
        "session_id": call.session_id,
        "status": call.status,
        "started_at": _iso(call.started_at),
        "ended_at": _iso(call.ended_at),
        "duration_s": call.duration_s,
        "mode": call.mode,
        "created_at": _iso(call.created_at),
        "failure_reason": call.failure_reason or None,
    }


# --- service endpoints ----------------------------------------------------------------------------


class CallInitiateView(APIView):
    @extend_schema(
        request=s.InitiateRequestSerializer,
        responses={202: s.InitiateResponseSerializer, **ERRORS, **PROVIDER_ERRORS},
        tags=TAGS,
        operation_id="calls_initiate",
        summary="Place an outbound phone call with a new session on a scenario",
    )
    def post(self, request):
        data = _validated(s.InitiateRequestSerializer, request.data)
        phone_number = data["phone_number"]
        scenario_name = data.get("scenario") or DEFAULT_SCENARIO
        if catalog.scenario(scenario_name) is None:
            raise ApiError(f"Scenario {scenario_name!r} not found.", 400, {"scenario": ["unknown scenario"]})
        if telephony_provider() == "twilio":
            return twilio_views.initiate(phone_number, scenario_name)
        client = _client()
        callback_url, media_url = _urls()
        started, session_id, scenario, _ = connect_call(
            scenario_name,
            "outbound",
            phone_number,
            partial(client.create_call, phone_number, callback_url=callback_url, media_url=media_url),
            "place the call",
        )
        return Response(
            {
                "connection_id": started.connection_id,
                "status": "initiating",
                "phone_number": phone_number,
                "scenario": scenario,
                "session_id": session_id,
            },
            status=202,
        )


def _int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not _DIGITS.match(raw) or raw.startswith("+"):
        raise ApiError(f"Invalid {name}: expected an integer from {low} to {high}.", 400, {name: ["invalid"]})
    value = int(raw)
    if not low <= value <= high:
        raise ApiError(f"Invalid {name}: expected an integer from {low} to {high}.", 400, {name: ["invalid"]})
    return value


class CallListView(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter(
                "page",
                {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
                description="1-based page number (default 1)",
            ),
            OpenApiParameter(
                "page_size",
                {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE},
                description=f"calls per page, 1-{MAX_PAGE_SIZE} (default 20)",
            ),
            OpenApiParameter(
                "status", str, enum=[*STATUSES, ""], description="only calls in this status (empty: all)"
            ),
        ],
        responses={200: s.CallListSerializer, **ERRORS},
        tags=TAGS,
        operation_id="calls_list",
        summary="Active and recent calls, newest first",
    )
    def get(self, request):
        page = _int_param(request, "page", 1, 1, MAX_PAGE)
        page_size = _int_param(request, "page_size", 20, 1, MAX_PAGE_SIZE)
        status = request.query_params.get("status") or None
        if status is not None and status not in STATUSES:
            raise ApiError(
                f"Invalid status: expected one of {', '.join(STATUSES)}.", 400, {"status": ["invalid"]}
            )
        calls = Call.objects.order_by("-created_at", "-id")
        if status:
            calls = calls.filter(status=status)
        total = calls.count()
        start = (page - 1) * page_size
        rows = calls[start : start + page_size]
        return Response(
            {"calls": [call_record(c) for c in rows], "total": total, "page": page, "page_size": page_size}
        )


class CallTerminateView(APIView):
    @extend_schema(
        request=s.TerminateRequestSerializer,
        responses={
            200: s.TerminateResponseSerializer,
            404: s.CallErrorSerializer,
            **ERRORS,
            **PROVIDER_ERRORS,
        },
        tags=TAGS,
        operation_id="calls_terminate",
        summary="Hang up an active call for everyone",
    )
    def post(self, request):
        cid = _validated(s.TerminateRequestSerializer, request.data)["connection_id"]
        if twilio_views.is_twilio_call(cid):
            return twilio_views.terminate(cid)
        client = _client()
        call = Call.objects.filter(connection_id=cid).first()
        if call is None or call.ended:
            raise ApiError(f"Call {cid!r} not found or already ended.", 404)
        try:
            async_to_sync(client.hang_up)(cid)
        except acs.TelephonyError as exc:
            if exc.status == 404:  # the provider no longer knows it: the call is over
                Call.objects.filter(connection_id=cid).exclude(status__in=("disconnected", "failed")).update(
                    status="disconnected"
                )
                Call.objects.filter(connection_id=cid, ended_at__isnull=True).update(ended_at=timezone.now())
                async_to_sync(callmap.forget)(cid)
                raise ApiError(f"Call {cid!r} not found or already ended.", 404) from None
            raise provider_error(exc, "hang up") from None
        except Exception as exc:
            raise provider_error(exc, "hang up") from None
        logger.info("call %s: hang-up requested", cid)
        return Response({"connection_id": cid, "status": "terminating"})


# --- provider webhooks ----------------------------------------------------------------------------


def _bad(message: str) -> ApiError:
    return ApiError(f"Invalid event: {message}", 400)


def _event_array(body: Any, what: str) -> list[dict[str, Any]]:
    if not isinstance(body, list):
        raise _bad(f"expected a JSON array of {what}")
    if not body:
        raise _bad("the array is empty")
    if len(body) > MAX_EVENTS:
        raise _bad(f"at most {MAX_EVENTS} events per request")
    for index, event in enumerate(body):
        if not isinstance(event, dict):
            raise _bad(f"[{index}] is not an object")
    return body


def _event_data(event: dict[str, Any], where: str) -> dict[str, Any]:
    data = event.get("data")
    if not isinstance(data, dict):
        raise _bad(f"{where}.data must be an object")
    return data


def _req_str(obj: dict[str, Any], key: str, where: str, limit: int) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise _bad(f"{where}.{key} must be a non-empty string")
    return value


def _opt_str(data: dict[str, Any], key: str, where: str, limit: int = 512) -> str:
    value = data.get(key)
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > limit:
        raise _bad(f"{where}.{key} must be a string of at most {limit} characters")
    return value


def _caller_number(identifier: Any, where: str) -> str:
    """The caller's number from a CommunicationIdentifier: ``phoneNumber.value`` or rawId ``4:+1...``."""
    if not isinstance(identifier, dict):
        raise _bad(f"{where} must be a communication identifier object")
    phone = identifier.get("phoneNumber")
    if phone is not None and not isinstance(phone, dict):
        raise _bad(f"{where}.phoneNumber must be an object")
    value = phone.get("value") if isinstance(phone, dict) else None
    if value is not None and not isinstance(value, str):
        raise _bad(f"{where}.phoneNumber.value must be a string")
    raw_id = _opt_str(identifier, "rawId", where)
    if not value and raw_id.startswith("4:"):
        value = raw_id[2:]
    if not value and not raw_id:
        raise _bad(f"{where} has neither phoneNumber.value nor rawId")
    return (value or raw_id)[:64]


def _validation_code(event: dict[str, Any], where: str) -> str:
    return _req_str(_event_data(event, where), "validationCode", f"{where}.data", 512)


def _incoming_call(event: dict[str, Any], where: str) -> dict[str, str]:
    data = _event_data(event, where)
    context = data.get("incomingCallContext")
    if not isinstance(context, str) or not context.strip() or len(context) > 100_000:
        raise _bad(f"{where}.data.incomingCallContext must be a non-empty string")
    if "from" not in data:
        raise _bad(f"{where}.data.from is missing")
    return {
        "context": context,
        "phone_number": _caller_number(data["from"], f"{where}.data.from"),
        "server_call_id": _opt_str(data, "serverCallId", f"{where}.data"),
        "correlation_id": _opt_str(data, "correlationId", f"{where}.data", 128),
    }


class CallAnswerView(APIView):
    """Event Grid webhook: subscription validation handshake and incoming calls (anonymous)."""

    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(
        request=s.EventGridEventSerializer(many=True),
        responses={200: s.AnswerResponseSerializer, 400: s.CallErrorSerializer, **PROVIDER_ERRORS},
        auth=[],
        tags=TAGS,
        operation_id="calls_answer",
        summary="Event Grid webhook: validation handshake and incoming calls",
    )
    def post(self, request):
        events = _event_array(request.data, "Event Grid events")
        codes: list[str] = []
        incoming: list[dict[str, str]] = []
        for index, event in enumerate(events):
            kind = event.get("eventType")
            where = f"[{index}]"
            if kind == VALIDATION_EVENT:
                codes.append(_validation_code(event, where))
            elif kind == INCOMING_CALL_EVENT:
                incoming.append(_incoming_call(event, where))
            elif not isinstance(kind, str):
                raise _bad(f"{where}.eventType must be a string")
            else:
                raise _bad(f"{where}.eventType {kind[:100]!r} is not handled here")
        if codes and incoming:
            raise _bad("a validation event cannot be batched with incoming calls")
        if codes:
            logger.info("Event Grid subscription validated")
            return Response({"validationResponse": codes[0]})
        client = _client()
        callback_url, media_url = _urls()
        answered = [self._answer(client, call, callback_url, media_url) for call in incoming]
        return Response({"status": "answered", "connection_id": answered[0]})

    def _answer(
        self, client: acs.TelephonyClient, call: dict[str, str], callback_url: str, media_url: str
    ) -> str:
        answered_key = ANSWERED_KEY.format(hashlib.sha256(call["context"].encode()).hexdigest())
        if (known := cache.get(answered_key)) is not None:
            # Event Grid redelivers when our 200 did not reach it; the provider would refuse a second
            # answer of the same call (and Event Grid would then retry for hours)
            logger.info("incoming call %s delivered again: already answered", known)
            return known
        if catalog.scenario(DEFAULT_SCENARIO) is None:  # a deployment problem, not the caller's
            raise ApiError(f"No {DEFAULT_SCENARIO!r} scenario is loaded to answer calls with.", 503)
        started, *_ = connect_call(
            DEFAULT_SCENARIO,
            "inbound",
            call["phone_number"],
            partial(client.answer_call, call["context"], callback_url=callback_url, media_url=media_url),
            "answer the call",
            server_call_id=call["server_call_id"],
            correlation_id=call["correlation_id"],
        )
        cache.set(answered_key, started.connection_id, ANSWERED_TTL_S)
        return started.connection_id


def _cloud_events(body: Any) -> list[dict[str, Any]]:
    events = _event_array(body, "CloudEvents")
    for index, event in enumerate(events):
        where = f"[{index}]"
        if event.get("specversion") != "1.0":
            raise _bad(f'{where}.specversion must be "1.0"')
        for key in ("id", "source", "type"):
            _req_str(event, key, where, 1024)
        _req_str(_event_data(event, where), "callConnectionId", f"{where}.data", 200)
    return events


class CallCallbacksView(APIView):
    """Call Automation callbacks (anonymous; validated by schema)."""

    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(
        request=s.CloudEventSerializer(many=True),
        responses={200: s.CallbacksResponseSerializer, 400: s.CallErrorSerializer},
        auth=[],
        tags=TAGS,
        operation_id="calls_callbacks",
        summary="Call Automation callback events (call state, DTMF, media streaming)",
    )
    def post(self, request):
        events = _cloud_events(request.data)
        return Response({"processed": process_events(events)})
