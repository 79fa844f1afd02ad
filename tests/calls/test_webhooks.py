"""The telephony provider's webhooks: Event Grid (``/calls/answer``) and Call Automation callbacks
(``/calls/callbacks``). Anonymous, so every malformed or hostile body must be a clear 400."""

from __future__ import annotations

import json
import logging
import uuid

import pytest
from acs_peer import (
    EVENTGRID_NOTIFICATION_HEADERS,
    EVENTGRID_VALIDATION_HEADERS,
    TEST_BASE_URL,
    TEST_CALLBACK_URL,
    TEST_CALLER_ID,
    TEST_MEDIA_URL,
    cloud_event,
    incoming_call_event,
    telephony_env,
    validation_event,
)
from asgiref.sync import async_to_sync

from agents_app import sessions
from calls import callmap
from calls.acs import reset_telephony_client
from calls.models import Call
from voiceagent.config import load_config

pytestmark = pytest.mark.django_db

BASE, CALLBACK, MEDIA, SOURCE = TEST_BASE_URL, TEST_CALLBACK_URL, TEST_MEDIA_URL, TEST_CALLER_ID
CALLER = "+15557654321"
TARGET = "+15551234567"


def post(api_client, url: str, body, **headers):
    return api_client.post(url, json.dumps(body), content_type="application/json", **headers)


def eventgrid(api_client, events, validation: bool = False):
    headers = EVENTGRID_VALIDATION_HEADERS if validation else EVENTGRID_NOTIFICATION_HEADERS
    meta = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
    return post(api_client, "/api/v1/calls/answer", events, **meta)


def callbacks(api_client, events):
    return post(api_client, "/api/v1/calls/callbacks", events)


def assert_400(response) -> dict:
    assert response.status_code == 400, (response.status_code, response.content[:300])
    body = response.json()
    assert isinstance(body.get("detail"), str) and body["detail"]
    return body


def lookup(cid: str) -> callmap.CallInfo | None:
    return async_to_sync(callmap.lookup)(cid)


def make_call(cid: str, status: str = "initiating", **fields) -> Call:
    return Call.objects.create(
        connection_id=cid,
        direction=fields.pop("direction", "outbound"),
        phone_number=TARGET,
        scenario="default",
        session_id=f"s-{cid}",
        status=status,
        **fields,
    )


# --- Event Grid: validation and incoming calls ----------------------------------------------------------
def test_subscription_validation_echoes_the_code(api_client, telephony):
    response = eventgrid(
        api_client, [validation_event("512d38b6-c7b8-40c8-89fe-f46f9e9622b6")], validation=True
    )
    assert response.status_code == 200
    assert response.json() == {"validationResponse": "512d38b6-c7b8-40c8-89fe-f46f9e9622b6"}
    assert telephony.requests == []


def test_subscription_validation_works_without_telephony(api_client, catalog_loaded, settings):
    reset_telephony_client()
    settings.CONFIG = load_config({})
    response = eventgrid(api_client, [validation_event("code-1")], validation=True)
    assert response.status_code == 200 and response.json() == {"validationResponse": "code-1"}


def test_incoming_call_is_answered_through_the_sdk(api_client, telephony):
    event = incoming_call_event(CALLER, SOURCE, context="ctx-abc-123")
    response = eventgrid(api_client, [event])
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "answered" and set(body) == {"status", "connection_id"}
    cid = body["connection_id"]
    assert cid in telephony.calls

    (request,) = telephony.requests_to("/calling/callConnections:answer")
    assert request.authorized
    assert request.body["incomingCallContext"] == "ctx-abc-123"
    assert request.body["callbackUri"] == CALLBACK
    media = request.body["mediaStreamingOptions"]
    assert media["transportUrl"] == MEDIA and media["audioFormat"] == "pcm16KMono"
    session_id = request.body["operationContext"]

    call = Call.objects.get(connection_id=cid)
    assert (call.direction, call.phone_number, call.scenario, call.session_id, call.mode) == (
        "inbound",
        CALLER,
        "default",
        session_id,
        "MEDIA",
    )
    assert call.status == "initiating"
    assert call.correlation_id == event["data"]["correlationId"]
    assert lookup(cid) == callmap.CallInfo(
        connection_id=cid,
        session_id=session_id,
        scenario="default",
        mode="MEDIA",
        direction="inbound",
        phone_number=CALLER,
    )
    state = sessions.load_state(session_id)
    assert state is not None and state.transport == "phone" and state.scenario == "default"


def test_a_redelivered_incoming_call_is_answered_once(api_client, telephony):
    """Event Grid delivers again when our 200 got lost; the provider must not be asked twice."""
    event = incoming_call_event(CALLER, SOURCE, context="ctx-redelivered")
    first = eventgrid(api_client, [event])
    again = eventgrid(api_client, [event])
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json()
    assert len(telephony.requests_to("/calling/callConnections:answer")) == 1
    assert Call.objects.filter(direction="inbound").count() == 1


def test_incoming_call_in_voice_live_mode_streams_24k(api_client, telephony, settings):
    settings.CONFIG = load_config(telephony_env(telephony, TELEPHONY_STREAMING_MODE="VOICE_LIVE"))
    response = eventgrid(api_client, [incoming_call_event(CALLER, SOURCE)])
    assert response.status_code == 200
    cid = response.json()["connection_id"]
    (request,) = telephony.requests_to("/calling/callConnections:answer")
    assert request.body["mediaStreamingOptions"]["audioFormat"] == "pcm24KMono"
    assert lookup(cid).mode == "VOICE_LIVE"
    assert Call.objects.get(connection_id=cid).mode == "VOICE_LIVE"


def test_incoming_call_number_from_raw_id(api_client, telephony):
    event = incoming_call_event(CALLER, SOURCE)
    event["data"]["from"] = {"kind": "phoneNumber", "rawId": f"4:{CALLER}"}
    response = eventgrid(api_client, [event])
    assert response.status_code == 200
    assert Call.objects.get(connection_id=response.json()["connection_id"]).phone_number == CALLER


def test_incoming_call_without_telephony_is_503(api_client, catalog_loaded, settings):
    reset_telephony_client()
    settings.CONFIG = load_config({"BASE_URL": BASE})
    response = eventgrid(api_client, [incoming_call_event(CALLER, SOURCE)])
    assert response.status_code == 503 and "detail" in response.json()
    assert Call.objects.count() == 0


def test_incoming_call_provider_failure_is_502(api_client, telephony):
    telephony.fail_next(400, "8523", "Invalid incoming call context")
    response = eventgrid(api_client, [incoming_call_event(CALLER, SOURCE)])
    assert response.status_code == 502
    detail = response.json()["detail"]
    assert "Invalid incoming call context" in detail and telephony.key not in detail
    assert Call.objects.count() == 0


def _incoming(**data_changes):
    event = incoming_call_event(CALLER, SOURCE)
    for key, value in data_changes.items():
        if value is ...:
            del event["data"][key]
        else:
            event["data"][key] = value
    return event


HOSTILE_ANSWER_BODIES = {
    "object": {
        "eventType": "Microsoft.EventGrid.SubscriptionValidationEvent",
        "data": {"validationCode": "x"},
    },
    "string": "hello",
    "number": 7,
    "null": None,
    "empty array": [],
    "array of numbers": [1, 2],
    "array of arrays": [[]],
    "unknown event": [{"eventType": "Microsoft.Communication.CallEnded", "data": {}}],
    "event type not a string": [{"eventType": ["x"], "data": {}}],
    "no event type": [{"data": {"validationCode": "x"}}],
    "validation without data": [{"eventType": "Microsoft.EventGrid.SubscriptionValidationEvent"}],
    "validation data not an object": [
        {"eventType": "Microsoft.EventGrid.SubscriptionValidationEvent", "data": "code"}
    ],
    "validation code missing": [{"eventType": "Microsoft.EventGrid.SubscriptionValidationEvent", "data": {}}],
    "validation code not a string": [
        {"eventType": "Microsoft.EventGrid.SubscriptionValidationEvent", "data": {"validationCode": 5}}
    ],
    "validation code empty": [
        {"eventType": "Microsoft.EventGrid.SubscriptionValidationEvent", "data": {"validationCode": ""}}
    ],
    "validation code huge": [
        {
            "eventType": "Microsoft.EventGrid.SubscriptionValidationEvent",
            "data": {"validationCode": "x" * 5000},
        }
    ],
    "incoming without context": [_incoming(incomingCallContext=...)],
    "incoming context empty": [_incoming(incomingCallContext="  ")],
    "incoming context not a string": [_incoming(incomingCallContext={"a": 1})],
    "incoming without from": [_incoming(**{"from": ...})],
    "incoming from not an object": [_incoming(**{"from": "+15557654321"})],
    "incoming from without number": [_incoming(**{"from": {"kind": "phoneNumber"}})],
    "incoming phoneNumber not an object": [_incoming(**{"from": {"phoneNumber": "+1555"}})],
    "incoming correlationId not a string": [_incoming(correlationId=12)],
    "incoming data not an object": [{**incoming_call_event(CALLER, SOURCE), "data": []}],
    "validation batched with a call": [validation_event("c"), incoming_call_event(CALLER, SOURCE)],
    "too many events": [validation_event("c")] * 101,
}


@pytest.mark.parametrize("body", HOSTILE_ANSWER_BODIES.values(), ids=HOSTILE_ANSWER_BODIES.keys())
def test_answer_rejects_what_is_not_a_known_event(api_client, telephony, body):
    assert_400(eventgrid(api_client, body))
    assert telephony.requests == [] and Call.objects.count() == 0


@pytest.mark.parametrize("raw", [b"[", b"not json", b"[{]", b"\x00\x01", b"[" * 300_000, b""])
def test_answer_malformed_json_is_400(api_client, telephony, raw):
    assert_400(api_client.post("/api/v1/calls/answer", raw, content_type="application/json"))


def assert_413(response) -> dict:
    assert response.status_code == 413, (response.status_code, response.content[:300])
    body = response.json()
    assert "too large" in body["detail"]
    return body


def test_answer_huge_body_is_413(api_client, telephony):
    event = validation_event("c")
    event["data"]["padding"] = "x" * (1024 * 1024 + 1)
    assert_413(eventgrid(api_client, [event]))


def test_answer_get_is_405_json(api_client, telephony):
    response = api_client.get("/api/v1/calls/answer")
    assert response.status_code == 405 and "detail" in response.json()


# --- callbacks ------------------------------------------------------------------------------------------
def test_call_connected_then_disconnected(api_client, telephony):
    make_call("c1")
    async_to_sync(callmap.remember)(callmap.CallInfo("c1", "s-c1", "default", "MEDIA", "outbound", TARGET))
    response = callbacks(
        api_client, [cloud_event("CallConnected", "c1", serverCallId="srv-1", correlationId="cor-1")]
    )
    assert response.status_code == 200 and response.json() == {"processed": 1}
    call = Call.objects.get(connection_id="c1")
    assert call.status == "connected" and call.started_at is not None
    assert call.server_call_id == "srv-1" and call.correlation_id == "cor-1"
    started = call.started_at

    # a redelivered CallConnected does not move started_at
    callbacks(api_client, [cloud_event("CallConnected", "c1")])
    assert Call.objects.get(connection_id="c1").started_at == started

    response = callbacks(api_client, [cloud_event("CallDisconnected", "c1")])
    assert response.json() == {"processed": 1}
    call = Call.objects.get(connection_id="c1")
    assert call.status == "disconnected" and call.ended_at is not None and call.duration_s >= 0
    assert lookup("c1") is None  # the media stream can no longer find it

    # late or repeated events never bring an ended call back
    callbacks(api_client, [cloud_event("CallConnected", "c1"), cloud_event("ParticipantsUpdated", "c1")])
    assert Call.objects.get(connection_id="c1").status == "disconnected"


@pytest.mark.parametrize("kind", ["CreateCallFailed", "AnswerFailed"])
def test_failures_record_the_reason(api_client, telephony, kind):
    make_call("f1")
    event = cloud_event(
        kind, "f1", resultInformation={"code": 408, "subCode": 8528, "message": "Call timed out: no answer."}
    )
    assert callbacks(api_client, [event]).json() == {"processed": 1}
    call = Call.objects.get(connection_id="f1")
    assert call.status == "failed" and call.ended_at is not None
    assert "no answer" in call.failure_reason and "408" in call.failure_reason
    listed = api_client.get("/api/v1/calls/?status=failed").json()["calls"][0]
    assert listed["failure_reason"] == call.failure_reason
    # a disconnect after the failure keeps the failure
    callbacks(api_client, [cloud_event("CallDisconnected", "f1")])
    assert Call.objects.get(connection_id="f1").status == "failed"


def test_failure_without_result_information(api_client, telephony):
    make_call("f2")
    event = cloud_event("CreateCallFailed", "f2")
    event["data"]["resultInformation"] = "oops"
    assert callbacks(api_client, [event]).json() == {"processed": 1}
    assert Call.objects.get(connection_id="f2").failure_reason == "call failed"


def test_participants_updated_connects_a_ringing_call(api_client, telephony):
    make_call("p1", status="ringing")
    make_call("p2", status="initiating")
    one = [{"identifier": {"rawId": f"4:{TARGET}"}}]
    two = [*one, {"identifier": {"rawId": "28:acs:bot"}}]
    callbacks(api_client, [cloud_event("ParticipantsUpdated", "p1", participants=one)])
    assert Call.objects.get(connection_id="p1").status == "ringing"
    callbacks(
        api_client,
        [
            cloud_event("ParticipantsUpdated", "p1", participants=two),
            cloud_event("ParticipantsUpdated", "p2", participants="garbage"),
        ],
    )
    assert Call.objects.get(connection_id="p1").status == "connected"
    assert Call.objects.get(connection_id="p1").started_at is not None
    assert Call.objects.get(connection_id="p2").status == "initiating"


def test_dtmf_and_media_failures_are_logged(api_client, telephony, caplog):
    make_call("d1", status="connected")
    caplog.set_level(logging.INFO, logger="calls.callbacks")
    events = [
        cloud_event(
            "ContinuousDtmfRecognitionToneReceived", "d1", toneInfo={"sequenceId": 1, "tone": "five"}
        ),
        cloud_event("ContinuousDtmfRecognitionToneReceived", "d1", tone="pound"),
        cloud_event("ContinuousDtmfRecognitionToneReceived", "d1", tone={"evil": True}),
        cloud_event("MediaStreamingFailed", "d1", resultInformation={"code": 500, "message": "ws refused"}),
    ]
    assert callbacks(api_client, events).json() == {"processed": 4}
    text = caplog.text
    assert "'five'" in text and "'pound'" in text and "ws refused" in text
    assert any(
        r.levelno == logging.WARNING and "media streaming failed" in r.getMessage() for r in caplog.records
    )
    assert Call.objects.get(connection_id="d1").status == "connected"


def test_unknown_types_and_unknown_calls_are_processed(api_client, telephony, caplog):
    make_call("u1", status="connected")
    caplog.set_level(logging.INFO, logger="calls.callbacks")
    events = [
        cloud_event("PlayCompleted", "u1"),
        cloud_event("Microsoft.Communication.SomethingNew", "u1"),
        cloud_event("CallConnected", "never-seen"),
        cloud_event("CallDisconnected", "never-seen-either"),
    ]
    assert callbacks(api_client, events).json() == {"processed": 4}
    assert Call.objects.get(connection_id="u1").status == "connected"
    assert not Call.objects.filter(connection_id__startswith="never").exists()
    assert "never-seen" in caplog.text


def _cloud(**changes):
    event = cloud_event("CallConnected", "cb-1")
    for key, value in changes.items():
        if value is ...:
            del event[key]
        else:
            event[key] = value
    return event


def _cloud_data(**changes):
    event = cloud_event("CallConnected", "cb-1")
    for key, value in changes.items():
        if value is ...:
            del event["data"][key]
        else:
            event["data"][key] = value
    return event


HOSTILE_CALLBACK_BODIES = {
    "object": cloud_event("CallConnected", "cb-1"),
    "string": "x",
    "null": None,
    "empty array": [],
    "array of strings": ["a"],
    "no specversion": [_cloud(specversion=...)],
    "specversion 0.3": [_cloud(specversion="0.3")],
    "specversion number": [_cloud(specversion=1.0)],
    "no id": [_cloud(id=...)],
    "empty id": [_cloud(id="")],
    "no type": [_cloud(type=...)],
    "type not a string": [_cloud(type=5)],
    "no source": [_cloud(source=...)],
    "no data": [_cloud(data=...)],
    "data not an object": [_cloud(data="connected")],
    "no callConnectionId": [_cloud_data(callConnectionId=...)],
    "callConnectionId number": [_cloud_data(callConnectionId=12)],
    "callConnectionId empty": [_cloud_data(callConnectionId="")],
    "callConnectionId huge": [_cloud_data(callConnectionId="x" * 201)],
    "one bad among good": [cloud_event("CallConnected", "cb-1"), _cloud(specversion=...)],
    "too many events": [cloud_event("PlayCompleted", "cb-1")] * 101,
}


@pytest.mark.parametrize("body", HOSTILE_CALLBACK_BODIES.values(), ids=HOSTILE_CALLBACK_BODIES.keys())
def test_callbacks_reject_malformed_events(api_client, telephony, body):
    make_call("cb-1")
    assert_400(callbacks(api_client, body))
    assert Call.objects.get(connection_id="cb-1").status == "initiating"  # nothing applied


@pytest.mark.parametrize("raw", [b"[", b'{"a":', b"\xff", b"[" * 300_000, b""])
def test_callbacks_malformed_json_is_400(api_client, telephony, raw):
    assert_400(api_client.post("/api/v1/calls/callbacks", raw, content_type="application/json"))


def test_callbacks_huge_body_is_413(api_client, telephony):
    event = cloud_event("CallConnected", "cb-1", padding="x" * (1024 * 1024 + 1))
    assert_413(callbacks(api_client, [event]))


# --- end to end -----------------------------------------------------------------------------------------
def test_outbound_call_lifecycle(api_client, telephony):
    """Place -> connected -> terminate -> disconnected; the record and the call map follow."""
    placed = post(api_client, "/api/v1/calls/initiate", {"phone_number": TARGET}).json()
    cid = placed["connection_id"]
    assert lookup(cid).session_id == placed["session_id"]
    callbacks(
        api_client, [telephony.cloud_event("CallConnected", cid, operationContext=placed["session_id"])]
    )
    listed = api_client.get("/api/v1/calls/?status=connected").json()
    assert listed["total"] == 1 and listed["calls"][0]["connection_id"] == cid
    assert listed["calls"][0]["session_id"] == placed["session_id"]

    response = post(api_client, "/api/v1/calls/terminate", {"connection_id": cid})
    assert response.json() == {"connection_id": cid, "status": "terminating"}
    assert telephony.requests_to(f"{cid}:terminate")
    callbacks(api_client, [telephony.cloud_event("CallDisconnected", cid)])
    call = api_client.get("/api/v1/calls/").json()["calls"][0]
    assert call["status"] == "disconnected" and call["duration_s"] is not None
    assert lookup(cid) is None
    assert post(api_client, "/api/v1/calls/terminate", {"connection_id": cid}).status_code == 404


def test_inbound_call_lifecycle(api_client, telephony):
    cid = eventgrid(api_client, [incoming_call_event(CALLER, SOURCE, context=uuid.uuid4().hex)]).json()[
        "connection_id"
    ]
    callbacks(api_client, [telephony.cloud_event("CallConnected", cid)])
    call = Call.objects.get(connection_id=cid)
    assert call.status == "connected" and call.direction == "inbound"
    assert call.server_call_id == telephony.calls[cid]["serverCallId"]
