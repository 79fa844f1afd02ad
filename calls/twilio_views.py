"""Twilio's webhooks, and placing and ending calls through Twilio.

``POST /twilio/voice`` is the voice webhook (form-encoded, as Twilio sends it): signed with
``X-Twilio-Signature`` (:mod:`calls.twilio_signature`), it answers TwiML that connects the call to
our Media Stream (``<Connect><Stream url="wss://<host>/api/v1/twilio/stream">``) with the session as
``<Parameter>``s. An inbound call gets a new phone session on the scenario the webhook URL names
(``?scenario=``), else the number called's (``TWILIO_NUMBER_SCENARIOS``), else ``default``; an
outbound call's session was made by ``/calls/initiate``, whose ``Url`` names it (the query is signed
with the rest). ``POST /twilio/status`` takes the call's status callbacks into its ``Call`` row, as
conditional updates (a late or repeated callback never revives an ended call). Missing or wrong
signatures get 403 ``{"detail"}`` before anything else is read.

:func:`initiate` and :func:`terminate` are ``/calls/initiate`` and ``/calls/terminate`` when Twilio
is the provider (:mod:`calls.telephony_views` hands over): the Calls API through
:mod:`calls.twilio_api`, the same session, call map entry and call row as an ACS call.
"""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import urlencode

from asgiref.sync import async_to_sync
from django.conf import settings
from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.parsers import FormParser
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView
from twilio.twiml.voice_response import Connect, VoiceResponse

from agents_app.catalog import catalog
from calls import callmap, twilio_api
from calls.acs import TelephonyError
from calls.call_setup import connect_call, provider_error, save_call, start_session
from calls.callbacks import LIVE, end_call
from calls.models import Call
from calls.telephony_serializers import CallErrorSerializer
from calls.twilio_signature import HEADER, public_url, valid_signature
from voiceagent.errors import ApiError

__all__ = [
    "STREAM_PATH",
    "TwilioDialView",
    "TwilioStatusView",
    "TwilioVoiceView",
    "initiate",
    "is_twilio_call",
    "terminate",
]

logger = logging.getLogger("calls.twilio")

VOICE_PATH = "/api/v1/twilio/voice"
STATUS_PATH = "/api/v1/twilio/status"
STREAM_PATH = "/api/v1/twilio/stream"
DEFAULT_SCENARIO = "default"
TAGS = ["twilio"]
CALL_SID = re.compile(r"CA[0-9a-f]{32}\Z")
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,128}\Z")
DIAL_FAILED = ("busy", "no-answer", "failed", "canceled")  # a <Dial> that reached nobody
# Twilio's CallStatus -> our call status (CONTRACTS "Calls and media")
STATUSES = {
    "queued": "initiating",
    "initiated": "initiating",
    "ringing": "ringing",
    "in-progress": "connected",
    "completed": "disconnected",
    "busy": "failed",
    "no-answer": "failed",
    "failed": "failed",
    "canceled": "failed",
}


class TwilioVoiceRequestSerializer(serializers.Serializer):
    """The voice webhook's form fields we read (Twilio sends more; all of them are signed)."""

    CallSid = serializers.RegexField(CALL_SID.pattern, help_text="CA + 32 hex digits")
    AccountSid = serializers.CharField(help_text="must be TWILIO_ACCOUNT_SID")
    From = serializers.CharField(required=False, allow_blank=True, max_length=64)
    To = serializers.CharField(required=False, allow_blank=True, max_length=64)
    Direction = serializers.CharField(required=False, help_text="inbound | outbound-api | outbound-dial")
    CallStatus = serializers.CharField(required=False)


class TwilioDialRequestSerializer(TwilioVoiceRequestSerializer):
    DialCallStatus = serializers.ChoiceField(choices=["completed", "answered", *DIAL_FAILED])


class TwilioStatusRequestSerializer(TwilioVoiceRequestSerializer):
    CallStatus = serializers.ChoiceField(choices=list(STATUSES))
    CallDuration = serializers.CharField(required=False)


class TwilioStatusResponseSerializer(serializers.Serializer):
    connection_id = serializers.CharField()
    status = serializers.CharField(allow_null=True, help_text="the call's status now; null: unknown call")


SIGNATURE_PARAMETER = OpenApiParameter(
    "X-Twilio-Signature",
    str,
    OpenApiParameter.HEADER,
    required=True,
    description="base64 HMAC-SHA1 (TWILIO_AUTH_TOKEN) of the public URL followed by the sorted form "
    "parameters' names and values; missing or wrong: 403",
)


def signed_errors(*more: int) -> dict[int, type[CallErrorSerializer]]:
    """The error answers of a signed webhook (malformed form, bad signature, not a form) and
    ``more``, all ``{"detail"}``: one table for the schema of each view."""
    return dict.fromkeys((400, 403, 415, *more), CallErrorSerializer)


# --- helpers ------------------------------------------------------------------------------------------
def _signed_form(request) -> dict[str, str]:
    """The form's fields once its signature holds (403 otherwise), and the account is ours."""
    url = public_url(request.path, request.META.get("QUERY_STRING", ""))
    if not valid_signature(url, request.data, request.headers.get(HEADER)):
        logger.warning("Twilio webhook %s refused: missing or invalid %s", request.path, HEADER)
        raise ApiError("Missing or invalid X-Twilio-Signature.", 403)
    form = {key: request.data.get(key) for key in request.data}
    if form.get("AccountSid") != settings.CONFIG.TWILIO_ACCOUNT_SID:
        raise ApiError("The request is for another Twilio account.", 403)
    return form


def _valid(serializer_class, form: dict[str, str]) -> dict[str, Any]:
    serializer = serializer_class(data=form)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _mode() -> str:
    return settings.CONFIG.TELEPHONY_STREAMING_MODE


def stream_twiml(session_id: str, scenario: str, **extra: str) -> str:
    """TwiML that connects the call to our Media Stream with the session (and ``extra``) as
    parameters."""
    url = public_url(STREAM_PATH, websocket=True)
    if url is None:
        raise ApiError("Telephony is not configured: set BASE_URL (the public URL of this service).", 503)
    response, connect = VoiceResponse(), Connect()
    stream = connect.stream(url=url)
    stream.parameter(name="session_id", value=session_id)
    stream.parameter(name="scenario", value=scenario)
    for name, value in extra.items():
        stream.parameter(name=name, value=value)
    response.append(connect)
    return str(response)


def _twiml(text: str) -> HttpResponse:
    return HttpResponse(text, content_type="text/xml; charset=utf-8")


def _outbound_info(call_sid: str, query: Any, number: str) -> callmap.CallInfo | None:
    """The call ``/calls/initiate`` placed, from the ``Url`` it gave Twilio (signed); None if none."""
    session_id, scenario = query.get("session_id", ""), query.get("scenario", "")
    if not session_id:
        return None
    if not SESSION_ID.match(session_id) or catalog.scenario(scenario) is None:
        raise ApiError("Invalid session_id or scenario in the webhook URL.", 400)
    return callmap.CallInfo(call_sid, session_id, scenario, _mode(), "outbound", number[:64])


def _inbound_info(call_sid: str, caller: str, called: str, asked: str = "") -> callmap.CallInfo:
    """A new phone session and call row for an incoming call: the scenario the webhook URL names
    (``?scenario=``, signed: set on the number in Twilio's console), else the number called's."""
    wanted = asked or (settings.CONFIG.get("TWILIO_NUMBER_SCENARIOS") or {}).get(called, DEFAULT_SCENARIO)
    if catalog.scenario(wanted) is None:
        logger.warning("Twilio number %s: scenario %r is not loaded; answering with default", called, wanted)
        wanted = DEFAULT_SCENARIO
    if catalog.scenario(wanted) is None:  # a deployment problem, not the caller's
        raise ApiError(f"No {DEFAULT_SCENARIO!r} scenario is loaded to answer calls with.", 503)
    session_id, scenario = start_session(wanted)
    info = callmap.CallInfo(call_sid, session_id, scenario, _mode(), "inbound", caller[:64])
    save_call(status="connected", started_at=timezone.now(), **_row(info))
    logger.info("inbound Twilio call %s (session %s, scenario %s)", call_sid, session_id, scenario)
    return info


def _row(info: callmap.CallInfo) -> dict[str, Any]:
    return {
        "connection_id": info.connection_id,
        "session_id": info.session_id,
        "scenario": info.scenario,
        "mode": info.mode,
        "direction": info.direction,
        "phone_number": info.phone_number or "",
    }


# --- webhooks -----------------------------------------------------------------------------------------
class TwilioVoiceView(APIView):
    """Twilio's voice webhook: TwiML that streams the call to us."""

    permission_classes = [AllowAny]
    authentication_classes: list = []
    parser_classes = [FormParser]

    @extend_schema(
        request={"application/x-www-form-urlencoded": TwilioVoiceRequestSerializer},
        parameters=[
            SIGNATURE_PARAMETER,
            OpenApiParameter("session_id", str, description="set by /calls/initiate on outbound calls"),
            OpenApiParameter(
                "scenario",
                str,
                description="the call's scenario: set by /calls/initiate on outbound calls; on a number's "
                "webhook URL, inbound calls to it (else TWILIO_NUMBER_SCENARIOS, else default)",
            ),
        ],
        responses={
            (200, "text/xml"): OpenApiResponse(
                OpenApiTypes.STR, description="TwiML <Response><Connect><Stream url=...>"
            ),
            **signed_errors(503),
        },
        auth=[],
        tags=TAGS,
        operation_id="twilio_voice",
        summary="Twilio voice webhook (signed): TwiML connecting the call to the Media Stream",
    )
    def post(self, request):
        form = _valid(TwilioVoiceRequestSerializer, _signed_form(request))
        call_sid = form["CallSid"]
        info = async_to_sync(callmap.lookup)(call_sid)  # Twilio asked again: the same answer
        if info is None:
            info = _outbound_info(call_sid, request.query_params, form.get("To") or "")
            if info is None:
                asked = str(request.query_params.get("scenario", ""))[:64]
                info = _inbound_info(call_sid, form.get("From") or "", form.get("To") or "", asked)
            async_to_sync(callmap.remember)(info)
        return _twiml(stream_twiml(info.session_id, info.scenario))


class TwilioStatusView(APIView):
    """Twilio's status callbacks of the calls we placed: the call row follows them."""

    permission_classes = [AllowAny]
    authentication_classes: list = []
    parser_classes = [FormParser]

    @extend_schema(
        request={"application/x-www-form-urlencoded": TwilioStatusRequestSerializer},
        parameters=[SIGNATURE_PARAMETER],
        responses={
            200: TwilioStatusResponseSerializer,
            **signed_errors(),
        },
        auth=[],
        tags=TAGS,
        operation_id="twilio_status",
        summary="Twilio call status callback (signed): the call record follows the call",
    )
    def post(self, request):
        form = _valid(TwilioStatusRequestSerializer, _signed_form(request))
        cid, status = form["CallSid"], STATUSES[form["CallStatus"]]
        calls = Call.objects.filter(connection_id=cid)
        if not calls.exists():
            logger.info("Twilio status %s for unknown call %s: ignored", form["CallStatus"], cid)
            return Response({"connection_id": cid, "status": None})
        if status == "ringing":
            calls.filter(status="initiating").update(status="ringing")
        elif status == "connected":
            calls.filter(status__in=LIVE).update(status="connected")
            calls.filter(started_at__isnull=True).update(started_at=timezone.now())
        elif status in ("disconnected", "failed"):
            end_call(cid, status, f"Twilio: {form['CallStatus']}")
        return Response({"connection_id": cid, "status": calls.values_list("status", flat=True).first()})


class TwilioDialView(APIView):
    """How a transfer's ``<Dial>`` ended (its ``action``): the call with the person is over (hang
    up), or nobody answered and the caller comes back to the agent on a new stream of the session,
    whose conversation tells them so."""

    permission_classes = [AllowAny]
    authentication_classes: list = []
    parser_classes = [FormParser]

    @extend_schema(
        request={"application/x-www-form-urlencoded": TwilioDialRequestSerializer},
        parameters=[SIGNATURE_PARAMETER],
        responses={
            (200, "text/xml"): OpenApiResponse(
                OpenApiTypes.STR,
                description="TwiML: <Hangup/> after the person's call, else <Connect><Stream> "
                "back to the agent",
            ),
            **signed_errors(503),
        },
        auth=[],
        tags=TAGS,
        operation_id="twilio_dial",
        summary="Twilio <Dial> action (signed): a transfer's outcome (nobody answered: back to the agent)",
    )
    def post(self, request):
        form = _valid(TwilioDialRequestSerializer, _signed_form(request))
        cid, status = form["CallSid"], form["DialCallStatus"]
        info = async_to_sync(callmap.lookup)(cid)
        if status not in DIAL_FAILED or info is None:
            logger.info("Twilio call %s: the transfer's dial ended (%s)", cid, status)
            end_call(cid, "disconnected")
            response = VoiceResponse()
            response.hangup()
            return _twiml(str(response))
        logger.info("Twilio call %s: the transfer's dial got %s; back to the agent", cid, status)
        why = f"the person's line did not answer ({status})"
        return _twiml(stream_twiml(info.session_id, info.scenario, transfer_failed=why))


# --- /calls/initiate and /calls/terminate through Twilio ----------------------------------------------
def _client() -> twilio_api.TwilioClient:
    client = twilio_api.twilio_client()
    if client is None:
        raise ApiError("Telephony is not configured: set TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN.", 503)
    return client


def initiate(phone_number: str, scenario_name: str) -> Response:
    """Place the call through Twilio's Calls API; Twilio fetches our voice webhook when it answers."""
    client = _client()
    scenario = catalog.scenario(scenario_name)
    status_url = public_url(STATUS_PATH)
    if scenario is None or status_url is None:
        raise ApiError("Telephony is not configured: set BASE_URL (the public URL of this service).", 503)

    async def place(*, audio_format: str, operation_context: str):
        query = urlencode({"session_id": operation_context, "scenario": scenario.name})
        twiml_url = public_url(VOICE_PATH, query)
        return await client.create_call(phone_number, twiml_url=twiml_url, status_url=status_url)

    started, session_id, name, _ = connect_call(
        scenario_name, "outbound", phone_number, place, "place the call"
    )
    body = {
        "connection_id": started.connection_id,
        "status": "initiating",
        "phone_number": phone_number,
        "scenario": name,
        "session_id": session_id,
    }
    return Response(body, status=202)


def is_twilio_call(cid: str) -> bool:
    """A Twilio call SID while Twilio is configured: ended through Twilio, whichever provider places
    this deployment's outbound calls."""
    return bool(CALL_SID.match(cid)) and twilio_api.twilio_client() is not None


def terminate(cid: str) -> Response:
    """Hang the call up through Twilio (``Status=completed``); the status callback ends its row."""
    client = _client()
    call = Call.objects.filter(connection_id=cid).first()
    if call is None or call.ended:
        raise ApiError(f"Call {cid!r} not found or already ended.", 404)
    try:
        async_to_sync(client.hang_up)(cid)
    except TelephonyError as exc:
        if exc.status == 404:  # Twilio no longer knows it: the call is over
            end_call(cid, "disconnected")
            raise ApiError(f"Call {cid!r} not found or already ended.", 404) from None
        raise provider_error(exc, "hang up") from None
    logger.info("Twilio call %s: hang-up requested", cid)
    return Response({"connection_id": cid, "status": "terminating"})
