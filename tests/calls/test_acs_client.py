"""TelephonyClient through the real Call Automation SDK against a local ACS REST peer (AcsPeer)."""

from __future__ import annotations

import base64
import os
import socket
import time

import pytest
from acs_peer import (
    TEST_CALLBACK_URL,
    TEST_CALLER_ID,
    TEST_MEDIA_URL,
    cloud_event,
    incoming_call_event,
    validation_event,
)
from django.test import override_settings

from calls import acs
from calls.acs import (
    CallStarted,
    TelephonyClient,
    TelephonyError,
    readiness_check,
    reset_telephony_client,
    set_telephony_client,
    telephony_client,
)
from voiceagent.config import load_config

SOURCE, CALLBACK, MEDIA = TEST_CALLER_ID, TEST_CALLBACK_URL, TEST_MEDIA_URL
TARGET = "+15551234567"


@pytest.fixture(autouse=True)
def _clean(peer):
    peer.reset()
    reset_telephony_client()
    yield
    reset_telephony_client()


@pytest.fixture
async def client(peer):
    c = TelephonyClient(peer.endpoint, access_key=peer.key, source_number=SOURCE, timeout_s=5)
    yield c
    await c.close()


def config(**env: str):
    return override_settings(CONFIG=load_config(env))


# --- the wire ---------------------------------------------------------------------------------------
async def test_create_call_sends_target_caller_id_callback_and_bidirectional_media(peer, client):
    started = await client.create_call(
        TARGET, callback_url=CALLBACK, media_url=MEDIA, audio_format="pcm24KMono", operation_context="op-1"
    )
    assert isinstance(started, CallStarted) and started.state == "connecting"
    assert started.connection_id in peer.calls
    assert started.server_call_id == peer.calls[started.connection_id]["serverCallId"]
    [request] = peer.requests_to("/calling/callConnections")
    assert request.authorized and request.query["api-version"] == "2026-03-12"
    body = request.body
    assert body["targets"] == [{"rawId": f"4:{TARGET}", "phoneNumber": {"value": TARGET}}]
    assert body["sourceCallerIdNumber"] == {"value": SOURCE}
    assert body["callbackUri"] == CALLBACK
    assert body["operationContext"] == "op-1"
    assert body["mediaStreamingOptions"] == {
        "transportUrl": MEDIA,
        "transportType": "websocket",
        "contentType": "audio",
        "audioChannelType": "mixed",
        "startMediaStreaming": True,
        "enableBidirectional": True,
        "audioFormat": "pcm24KMono",
        "enableDtmfTones": True,
    }
    assert request.headers["authorization"].startswith("HMAC-SHA256 SignedHeaders=x-ms-date;host;")


async def test_answer_call_passes_incoming_call_context(peer, client):
    event = incoming_call_event(TARGET, SOURCE, context="ctx-abc123")
    context = event["data"]["incomingCallContext"]
    started = await client.answer_call(
        context, callback_url=CALLBACK, media_url=MEDIA, audio_format="pcm16KMono"
    )
    [request] = peer.requests_to("/calling/callConnections:answer")
    assert request.body["incomingCallContext"] == "ctx-abc123"
    assert request.body["callbackUri"] == CALLBACK
    assert request.body["mediaStreamingOptions"]["audioFormat"] == "pcm16KMono"
    assert request.body["mediaStreamingOptions"]["enableBidirectional"] is True
    assert peer.calls[started.connection_id]["incomingCallContext"] == "ctx-abc123"


async def test_hang_up_terminates_then_404_for_an_ended_call(peer, client):
    started = await client.create_call(
        TARGET, callback_url=CALLBACK, media_url=MEDIA, audio_format="pcm16KMono"
    )
    await client.hang_up(started.connection_id)
    [request] = peer.requests_to(f"/calling/callConnections/{started.connection_id}:terminate")
    assert request.authorized
    assert peer.calls[started.connection_id]["callConnectionState"] == "disconnected"
    with pytest.raises(TelephonyError) as ended:
        await client.hang_up(started.connection_id)
    assert ended.value.status == 404
    with pytest.raises(TelephonyError) as unknown:
        await client.hang_up("no-such-call")
    assert unknown.value.status == 404 and "Call not found" in str(unknown.value)


async def test_transfer_asks_for_a_phone_number_or_an_acs_user_as_azure_documents_it(peer, client):
    started = await client.create_call(
        TARGET, callback_url=CALLBACK, media_url=MEDIA, audio_format="pcm16KMono"
    )
    cid = started.connection_id
    await client.transfer(cid, "+15550009999", operation_context="transfer:s1")
    await client.transfer(cid, "8:acs:resource_user-1")
    [pstn, user] = peer.requests_to(f"/calling/callConnections/{cid}:transferToParticipant")
    assert pstn.authorized and pstn.query.get("api-version")
    target = pstn.body["targetParticipant"]
    assert target["rawId"] == "4:+15550009999" and target["phoneNumber"] == {"value": "+15550009999"}
    assert pstn.body["operationContext"] == "transfer:s1"
    assert pstn.body["sourceCallerIdNumber"] == {"value": SOURCE}  # our number calls the person
    assert user.body["targetParticipant"]["communicationUser"] == {"id": "8:acs:resource_user-1"}
    assert "sourceCallerIdNumber" not in user.body
    assert [t["connection_id"] for t in peer.transfers] == [cid, cid]
    with pytest.raises(TelephonyError) as ended:
        await client.transfer("no-such-call", "+15550009999")
    assert ended.value.status == 404


# --- failures ---------------------------------------------------------------------------------------
async def test_wrong_key_is_401_without_the_key_in_the_message(peer):
    wrong_key = base64.b64encode(os.urandom(32)).decode()
    bad = TelephonyClient(peer.endpoint, access_key=wrong_key, source_number=SOURCE)
    try:
        with pytest.raises(TelephonyError) as err:
            await bad.create_call(TARGET, callback_url=CALLBACK, media_url=MEDIA, audio_format="pcm16KMono")
    finally:
        await bad.close()
    assert err.value.status == 401
    text = str(err.value) + repr(err.value)
    assert wrong_key not in text and peer.key not in text and "Signature" not in text
    assert err.value.__cause__ is None and err.value.__suppress_context__
    assert peer.requests[-1].authorized is False and not peer.calls


async def test_scripted_provider_error_keeps_status_and_message(peer, client):
    peer.fail_next(403, "8501", "Action is invalid when call is not in Established state.")
    with pytest.raises(TelephonyError) as err:
        await client.create_call(TARGET, callback_url=CALLBACK, media_url=MEDIA, audio_format="pcm16KMono")
    assert err.value.status == 403 and "Established" in str(err.value)


async def test_a_5xx_is_retried_once_with_the_same_repeatability_id(peer, client):
    peer.fail_next(503, "ServiceUnavailable", "try again")
    started = await client.create_call(
        TARGET, callback_url=CALLBACK, media_url=MEDIA, audio_format="pcm16KMono"
    )
    first, second = peer.requests_to("/calling/callConnections")
    assert first.headers["repeatability-request-id"] == second.headers["repeatability-request-id"]
    assert list(peer.calls) == [started.connection_id]


async def test_scripted_404_on_hang_up_is_status_404(peer, client):
    started = await client.create_call(
        TARGET, callback_url=CALLBACK, media_url=MEDIA, audio_format="pcm16KMono"
    )
    peer.fail_next(404, "8522", "Call not found")
    with pytest.raises(TelephonyError) as err:
        await client.hang_up(started.connection_id)
    assert err.value.status == 404


async def test_peer_down_is_status_none_quickly():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    key = base64.b64encode(os.urandom(32)).decode()
    down = TelephonyClient(f"http://127.0.0.1:{port}", access_key=key, source_number=SOURCE, timeout_s=10)
    began = time.monotonic()
    try:
        with pytest.raises(TelephonyError) as err:
            await down.hang_up("abc")
    finally:
        await down.close()
    assert err.value.status is None
    assert str(err.value).startswith("telephony provider unreachable")
    assert key not in str(err.value)
    assert time.monotonic() - began < 8  # refused at once: it never waited for the 10 s timeout


async def test_slow_provider_times_out(peer):
    slow = TelephonyClient(peer.endpoint, access_key=peer.key, source_number=SOURCE, timeout_s=0.3)
    peer.delay_next(6)
    began = time.monotonic()
    try:
        with pytest.raises(TelephonyError) as err:
            await slow.create_call(TARGET, callback_url=CALLBACK, media_url=MEDIA, audio_format="pcm16KMono")
    finally:
        await slow.close()
    assert err.value.status is None and "timed out" in str(err.value)
    assert time.monotonic() - began < 5  # cut short: the provider would have taken 6 s


async def test_create_call_without_caller_id_is_refused_before_the_wire(peer):
    c = TelephonyClient(peer.endpoint, access_key=peer.key)
    with pytest.raises(TelephonyError):
        await c.create_call(TARGET, callback_url=CALLBACK, media_url=MEDIA, audio_format="pcm16KMono")
    await c.close()
    assert not peer.requests


async def test_unknown_audio_format_is_a_value_error(client):
    with pytest.raises(ValueError):
        await client.create_call(TARGET, callback_url=CALLBACK, media_url=MEDIA, audio_format="mulaw")


# --- the process client and readiness ---------------------------------------------------------------
def test_telephony_client_none_without_config():
    with config():
        assert telephony_client() is None


async def test_telephony_client_built_from_config_and_cached(peer):
    with config(
        TELEPHONY_ENDPOINT=peer.endpoint, TELEPHONY_ACCESS_KEY=peer.key, TELEPHONY_PHONE_NUMBER=SOURCE
    ):
        built = telephony_client()
        assert isinstance(built, TelephonyClient)
        assert telephony_client() is built
        assert built.source_number == SOURCE and peer.key not in repr(built)
        started = await built.create_call(
            TARGET, callback_url=CALLBACK, media_url=MEDIA, audio_format="pcm16KMono"
        )
        await built.hang_up(started.connection_id)
        await built.close()
    assert peer.calls[started.connection_id]["callConnectionState"] == "disconnected"
    with config(
        TELEPHONY_ENDPOINT=peer.endpoint, TELEPHONY_ACCESS_KEY=peer.key, TELEPHONY_PHONE_NUMBER="+15559999999"
    ):
        assert telephony_client() is not built  # a config change rebuilds


def test_set_and_reset_telephony_client():
    injected = TelephonyClient("https://acs.example.com", access_key="a2V5", source_number=SOURCE)
    with config():
        set_telephony_client(injected)
        assert telephony_client() is injected
        set_telephony_client(None)
        assert telephony_client() is None
    with config(TELEPHONY_ENDPOINT="https://acs.example.com", TELEPHONY_ACCESS_KEY="a2V5"):
        set_telephony_client(None)
        assert telephony_client() is None  # injected "not configured" wins over settings
        reset_telephony_client()
        assert isinstance(telephony_client(), TelephonyClient)


def test_managed_identity_client_has_no_key():
    with config(TELEPHONY_ENDPOINT="https://acs.example.com", USE_DEFAULT_CREDENTIAL="true"):
        built = telephony_client()
        assert built is not None and built._access_key is None


@pytest.mark.parametrize(
    ("env", "status", "fragment"),
    [
        ({}, "not_configured", "TELEPHONY_ENDPOINT not set"),
        (
            {"TELEPHONY_ENDPOINT": "https://acs.example.com", "BASE_URL": "https://v.example.com"},
            "unhealthy",
            "TELEPHONY_PHONE_NUMBER",
        ),
        (
            {"TELEPHONY_ENDPOINT": "https://acs.example.com", "TELEPHONY_PHONE_NUMBER": SOURCE},
            "unhealthy",
            "BASE_URL",
        ),
        (
            {
                "TELEPHONY_ENDPOINT": "https://acs.example.com",
                "TELEPHONY_PHONE_NUMBER": SOURCE,
                "BASE_URL": "https://v.example.com",
                "TELEPHONY_ACCESS_KEY": "c2VjcmV0LWtleQ==",
            },
            "healthy",
            "ACS endpoint acs.example.com configured",
        ),
    ],
)
async def test_readiness_check_states(env, status, fragment):
    from voiceagent.contributions import contributions, resolve

    contributed = next(resolve(c.check) for c in contributions.checks if c.component == "telephony")
    with config(**env):
        for check in (readiness_check, contributed):
            got_status, detail = await check()
            assert got_status == status and fragment in detail
            assert "c2VjcmV0LWtleQ==" not in detail


async def test_readiness_check_makes_no_network_call(peer):
    with config(
        TELEPHONY_ENDPOINT=peer.endpoint,
        TELEPHONY_ACCESS_KEY=peer.key,
        TELEPHONY_PHONE_NUMBER=SOURCE,
        BASE_URL="https://v.example.com",
    ):
        assert (await readiness_check())[0] == "healthy"
    assert not peer.requests


# --- webhook payload builders ----------------------------------------------------------------------
def test_webhook_payload_builders_have_the_provider_shapes(peer):
    event = cloud_event("PlayFailed", "cid-1", operationContext="greet", resultInformation={"code": 500})
    assert event["type"] == "Microsoft.Communication.PlayFailed" and event["specversion"] == "1.0"
    assert event["source"] == "calling/callConnections/cid-1"
    assert event["data"]["callConnectionId"] == "cid-1" and event["data"]["operationContext"] == "greet"
    assert event["data"]["resultInformation"] == {"code": 500}
    incoming = incoming_call_event(TARGET, SOURCE)
    assert incoming["eventType"] == "Microsoft.Communication.IncomingCall"
    assert incoming["data"]["from"]["rawId"] == f"4:{TARGET}"
    assert incoming["data"]["incomingCallContext"].startswith("ctx-")
    validation = validation_event("code-9")
    assert validation["eventType"] == "Microsoft.EventGrid.SubscriptionValidationEvent"
    assert validation["data"]["validationCode"] == "code-9"
    assert acs.AUDIO_FORMATS == ("pcm16KMono", "pcm24KMono")
