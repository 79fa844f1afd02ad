"""REST for phone calls: initiate, list, terminate — through the real Call Automation SDK against
the local ACS peer, with every error status and hostile input answered by a clear 4xx."""

from __future__ import annotations

import datetime as dt
import json
import logging
import socket

import pytest
from acs_peer import TEST_BASE_URL, TEST_CALLBACK_URL, TEST_CALLER_ID, TEST_MEDIA_URL, AcsPeer
from asgiref.sync import async_to_sync
from django.test import override_settings
from django.utils import timezone

from agents_app import sessions
from calls import callmap
from calls.acs import TelephonyClient, reset_telephony_client, set_telephony_client
from calls.models import Call
from voiceagent.config import load_config

pytestmark = pytest.mark.django_db

BASE, CALLBACK, MEDIA, SOURCE = TEST_BASE_URL, TEST_CALLBACK_URL, TEST_MEDIA_URL, TEST_CALLER_ID
TARGET = "+15551234567"
STRONG = "s" * 30 + "abcdefghijklmnopqrstuvwxyz"
CALL_KEYS = {
    "connection_id",
    "direction",
    "phone_number",
    "scenario",
    "session_id",
    "status",
    "started_at",
    "ended_at",
    "duration_s",
    "mode",
}


@pytest.fixture
def no_telephony(catalog_loaded, settings):
    reset_telephony_client()
    settings.CONFIG = load_config({"BASE_URL": BASE})
    yield
    reset_telephony_client()


def post(api_client, url: str, body, **extra):
    return api_client.post(url, json.dumps(body), content_type="application/json", **extra)


def assert_error(response, status: int) -> dict:
    assert response.status_code == status, (response.status_code, response.content[:300])
    body = response.json()
    assert isinstance(body.get("detail"), str) and body["detail"]
    assert "Traceback" not in body["detail"]
    return body


def lookup(cid: str) -> callmap.CallInfo | None:
    return async_to_sync(callmap.lookup)(cid)


def make_call(cid: str, *, status: str = "connected", minutes_ago: int = 0, **fields) -> Call:
    call = Call.objects.create(
        connection_id=cid,
        direction=fields.pop("direction", "outbound"),
        phone_number=fields.pop("phone_number", TARGET),
        scenario=fields.pop("scenario", "default"),
        session_id=fields.pop("session_id", f"s-{cid}"),
        status=status,
        **fields,
    )
    Call.objects.filter(pk=call.pk).update(created_at=timezone.now() - dt.timedelta(minutes=minutes_ago))
    return call


# --- initiate -----------------------------------------------------------------------------------------
def test_initiate_places_the_call_through_the_sdk(api_client, telephony):
    response = post(api_client, "/api/v1/calls/initiate", {"phone_number": TARGET})
    assert response.status_code == 202, response.json()
    body = response.json()
    assert set(body) == {"connection_id", "status", "phone_number", "scenario", "session_id"}
    assert body["status"] == "initiating" and body["phone_number"] == TARGET and body["scenario"] == "default"
    cid, session_id = body["connection_id"], body["session_id"]
    assert cid in telephony.calls

    (request,) = telephony.requests_to("/calling/callConnections")
    assert request.authorized
    sent = request.body
    assert sent["targets"][0]["rawId"] == f"4:{TARGET}"
    assert sent["sourceCallerIdNumber"]["value"] == SOURCE
    assert sent["callbackUri"] == CALLBACK
    assert sent["operationContext"] == session_id
    media = sent["mediaStreamingOptions"]
    assert media["transportUrl"] == MEDIA
    assert media["audioFormat"] == "pcm16KMono"
    assert media["enableBidirectional"] is True and media["startMediaStreaming"] is True

    call = Call.objects.get(connection_id=cid)
    assert (call.direction, call.status, call.mode, call.session_id) == (
        "outbound",
        "initiating",
        "MEDIA",
        session_id,
    )
    assert call.server_call_id == telephony.calls[cid]["serverCallId"]
    info = lookup(cid)
    assert info == callmap.CallInfo(
        connection_id=cid,
        session_id=session_id,
        scenario="default",
        mode="MEDIA",
        direction="outbound",
        phone_number=TARGET,
    )
    state = sessions.load_state(session_id)
    assert state is not None and state.transport == "phone" and state.scenario == "default"


def test_initiate_voice_live_streams_24k_and_records_the_mode(api_client, telephony, settings):
    settings.CONFIG = load_config(
        {
            "TELEPHONY_ENDPOINT": telephony.endpoint,
            "TELEPHONY_ACCESS_KEY": telephony.key,
            "TELEPHONY_PHONE_NUMBER": SOURCE,
            "BASE_URL": "http://localhost:8000/",
            "TELEPHONY_STREAMING_MODE": "VOICE_LIVE",
        }
    )
    response = post(api_client, "/api/v1/calls/initiate", {"phone_number": TARGET, "scenario": "BANKING"})
    assert response.status_code == 202, response.json()
    body = response.json()
    assert body["scenario"] == "banking"
    sent = telephony.requests_to("/calling/callConnections")[-1].body
    assert sent["mediaStreamingOptions"]["audioFormat"] == "pcm24KMono"
    assert sent["mediaStreamingOptions"]["transportUrl"] == "ws://localhost:8000/api/v1/media/stream"
    assert sent["callbackUri"] == "http://localhost:8000/api/v1/calls/callbacks"
    info = lookup(body["connection_id"])
    assert info.mode == "VOICE_LIVE" and info.scenario == "banking" and info.session_id == body["session_id"]
    listed = api_client.get("/api/v1/calls/").json()["calls"][0]
    assert listed["mode"] == "VOICE_LIVE" and listed["connection_id"] == body["connection_id"]


@pytest.mark.parametrize(
    "body",
    [
        {"phone_number": "15551234567"},
        {"phone_number": "+1234567"},  # 7 digits
        {"phone_number": "+1234567890123456"},  # 16 digits
        {"phone_number": "+1555abc4567"},
        {"phone_number": "+1 555 123 4567"},
        {"phone_number": "++15551234567"},
        {"phone_number": "+١٥٥٥١٢٣٤٥٦٧"},  # non-ASCII digits
        {"phone_number": "+15551234567; DROP TABLE calls"},
        {"phone_number": ""},
        {"phone_number": None},
        {"phone_number": 15551234567},
        {"phone_number": ["+15551234567"]},
        {"phone_number": {"value": "+15551234567"}},
        {},
        {"phone_number": TARGET, "scenario": "no-such-scenario"},
        {"phone_number": TARGET, "scenario": "x" * 10_000},
        {"phone_number": TARGET, "scenario": ["default"]},
        {"phone_number": TARGET, "unexpected": 1},
        [],
        [{"phone_number": TARGET}],
        "+15551234567",
        None,
        42,
    ],
)
def test_initiate_rejects_bad_input_with_400(api_client, telephony, body):
    response = post(api_client, "/api/v1/calls/initiate", body)
    assert_error(response, 400)
    assert telephony.requests == [] and Call.objects.count() == 0


def test_initiate_400_names_the_field(api_client, telephony):
    body = assert_error(post(api_client, "/api/v1/calls/initiate", {"phone_number": "12"}), 400)
    assert "phone_number" in body["errors"]
    body = assert_error(
        post(api_client, "/api/v1/calls/initiate", {"phone_number": TARGET, "scenario": "nope"}), 400
    )
    assert "scenario" in body["errors"] and "nope" in body["detail"]


@pytest.mark.parametrize(
    "raw",
    [b"{", b'{"phone_number": "+15551234567"', b"\xff\xfe", b"[" * 200_000, b"nan", b""],
)
def test_initiate_malformed_json_is_400(api_client, telephony, raw):
    response = api_client.post("/api/v1/calls/initiate", raw, content_type="application/json")
    assert_error(response, 400)


def test_initiate_oversized_body_is_413(api_client, telephony):
    body = json.dumps({"phone_number": TARGET, "scenario": "x" * (1024 * 1024 + 10)})
    response = api_client.post("/api/v1/calls/initiate", body, content_type="application/json")
    assert_error(response, 413)
    assert "too large" in response.json()["detail"]


def test_initiate_form_body_is_415(api_client, telephony):
    response = api_client.post("/api/v1/calls/initiate", {"phone_number": TARGET})
    assert_error(response, 415)


def test_initiate_without_telephony_is_503(api_client, no_telephony, caplog):
    with caplog.at_level(logging.INFO):
        body = assert_error(post(api_client, "/api/v1/calls/initiate", {"phone_number": TARGET}), 503)
    assert "TELEPHONY_ENDPOINT" in body["detail"]
    # an answer the service chose, not an incident: one WARNING with the reason, no ERROR
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING] == [
        ("WARNING", f"POST /api/v1/calls/initiate: 503, {body['detail']}")
    ]
    # input is still validated first
    assert_error(post(api_client, "/api/v1/calls/initiate", {"phone_number": "nope"}), 400)


def test_initiate_without_base_url_is_503(api_client, telephony, settings):
    settings.CONFIG = load_config(
        {"TELEPHONY_ENDPOINT": telephony.endpoint, "TELEPHONY_ACCESS_KEY": telephony.key}
    )
    body = assert_error(post(api_client, "/api/v1/calls/initiate", {"phone_number": TARGET}), 503)
    assert "BASE_URL" in body["detail"] and telephony.requests == []


def test_initiate_provider_failure_is_502_without_secrets(api_client, telephony):
    # the SDK retries a 500 once: both attempts fail
    telephony.fail_next(500, "InternalError", "The service is having a bad day")
    telephony.fail_next(500, "InternalError", "The service is having a bad day")
    response = post(api_client, "/api/v1/calls/initiate", {"phone_number": TARGET})
    body = assert_error(response, 502)
    assert "bad day" in body["detail"]
    assert telephony.key not in response.content.decode() and "Signature" not in body["detail"]
    assert Call.objects.count() == 0


def test_initiate_wrong_key_is_502(api_client, telephony, settings):
    other = AcsPeer().key
    settings.CONFIG = load_config(
        {
            "TELEPHONY_ENDPOINT": telephony.endpoint,
            "TELEPHONY_ACCESS_KEY": other,
            "TELEPHONY_PHONE_NUMBER": SOURCE,
            "BASE_URL": BASE,
        }
    )
    response = post(api_client, "/api/v1/calls/initiate", {"phone_number": TARGET})
    assert_error(response, 502)
    assert other not in response.content.decode()


def test_initiate_unreachable_provider_is_502(api_client, catalog_loaded, settings):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    reset_telephony_client()
    settings.CONFIG = load_config({"BASE_URL": BASE})
    set_telephony_client(
        TelephonyClient(
            f"http://127.0.0.1:{port}", access_key=AcsPeer().key, source_number=SOURCE, timeout_s=2
        )
    )
    try:
        assert_error(post(api_client, "/api/v1/calls/initiate", {"phone_number": TARGET}), 502)
    finally:
        reset_telephony_client()


def test_initiate_unexpected_client_error_is_502(api_client, catalog_loaded, settings):
    class Broken(TelephonyClient):
        def __init__(self):
            pass

        async def create_call(self, *args, **kwargs):
            raise RuntimeError("secret-ish internals")

    settings.CONFIG = load_config({"BASE_URL": BASE})
    set_telephony_client(Broken())
    try:
        body = assert_error(post(api_client, "/api/v1/calls/initiate", {"phone_number": TARGET}), 502)
        assert "internals" not in body["detail"]
    finally:
        reset_telephony_client()


# --- list -------------------------------------------------------------------------------------------------
def test_list_is_newest_first_paginated_in_the_database(api_client, catalog_loaded):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for i in range(25):
        make_call(f"c{i:02d}", minutes_ago=i, status="connected" if i % 2 else "disconnected")
    with CaptureQueriesContext(connection) as queries:
        body = api_client.get("/api/v1/calls/?page=1&page_size=10").json()
    call_queries = [q["sql"] for q in queries.captured_queries if '"calls_call"' in q["sql"]]
    assert len(call_queries) == 2  # a COUNT and one page, never the whole table
    assert "COUNT(" in call_queries[0] and "LIMIT 10" in call_queries[1]
    assert body["total"] == 25 and body["page"] == 1 and body["page_size"] == 10
    assert [c["connection_id"] for c in body["calls"]] == [f"c{i:02d}" for i in range(10)]
    for call in body["calls"]:
        assert set(call) >= CALL_KEYS
    last = api_client.get("/api/v1/calls/?page=3&page_size=10").json()
    assert [c["connection_id"] for c in last["calls"]] == [f"c{i:02d}" for i in range(20, 25)]
    beyond = api_client.get("/api/v1/calls/?page=4&page_size=10").json()
    assert beyond["calls"] == [] and beyond["total"] == 25
    default = api_client.get("/api/v1/calls/").json()
    assert default["page"] == 1 and default["page_size"] == 20 and len(default["calls"]) == 20
    full = api_client.get("/api/v1/calls/?page_size=100").json()
    assert len(full["calls"]) == 25


def test_list_filters_by_status(api_client, catalog_loaded):
    make_call("a", status="connected")
    make_call("b", status="failed", failure_reason="busy")
    make_call("c", status="connected", minutes_ago=5)
    body = api_client.get("/api/v1/calls/?status=connected").json()
    assert body["total"] == 2 and [c["connection_id"] for c in body["calls"]] == ["a", "c"]
    failed = api_client.get("/api/v1/calls/?status=failed").json()
    assert failed["total"] == 1 and failed["calls"][0]["status"] == "failed"
    assert api_client.get("/api/v1/calls/?status=ringing").json() == {
        "calls": [],
        "total": 0,
        "page": 1,
        "page_size": 20,
    }


def test_list_reports_times_and_duration(api_client, catalog_loaded):
    start = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    make_call("done", status="disconnected", started_at=start, ended_at=start + dt.timedelta(seconds=90.5))
    make_call("live", status="connected", started_at=start, minutes_ago=1)
    calls = {c["connection_id"]: c for c in api_client.get("/api/v1/calls/").json()["calls"]}
    assert calls["done"]["started_at"] == "2026-01-02T03:04:05Z"
    assert calls["done"]["ended_at"] == "2026-01-02T03:05:35.500000Z"
    assert calls["done"]["duration_s"] == 90.5
    assert calls["live"]["ended_at"] is None and calls["live"]["duration_s"] is None


@pytest.mark.parametrize(
    "query",
    [
        "page=0",
        "page=-1",
        "page=abc",
        "page=1.5",
        "page=1e3",
        "page=%2B1",
        "page=99999999999999999999999",
        "page_size=0",
        "page_size=101",
        "page_size=-5",
        "page_size=ten",
        "status=bogus",
        "status=CONNECTED",
        "status=%00",
        "page=%EF%BC%91",  # fullwidth 1
    ],
)
def test_list_bad_parameters_are_400(api_client, catalog_loaded, query):
    assert_error(api_client.get(f"/api/v1/calls/?{query}"), 400)


# --- terminate --------------------------------------------------------------------------------------------
def test_terminate_hangs_up_through_the_sdk(api_client, telephony):
    cid = post(api_client, "/api/v1/calls/initiate", {"phone_number": TARGET}).json()["connection_id"]
    response = post(api_client, "/api/v1/calls/terminate", {"connection_id": cid})
    assert response.status_code == 200, response.json()
    assert response.json() == {"connection_id": cid, "status": "terminating"}
    (request,) = telephony.requests_to(f"/calling/callConnections/{cid}:terminate")
    assert request.authorized
    assert telephony.calls[cid]["callConnectionState"] == "disconnected"


def test_terminate_unknown_or_ended_call_is_404(api_client, telephony):
    assert_error(post(api_client, "/api/v1/calls/terminate", {"connection_id": "nope"}), 404)
    make_call("ended", status="disconnected")
    make_call("failed", status="failed")
    assert_error(post(api_client, "/api/v1/calls/terminate", {"connection_id": "ended"}), 404)
    assert_error(post(api_client, "/api/v1/calls/terminate", {"connection_id": "failed"}), 404)
    assert telephony.requests == []


def test_terminate_provider_404_marks_the_call_ended(api_client, telephony):
    make_call("gone-at-provider", status="connected")
    async_to_sync(callmap.remember)(
        callmap.CallInfo("gone-at-provider", "s1", "default", "MEDIA", "outbound", TARGET)
    )
    assert_error(post(api_client, "/api/v1/calls/terminate", {"connection_id": "gone-at-provider"}), 404)
    call = Call.objects.get(connection_id="gone-at-provider")
    assert call.status == "disconnected" and call.ended_at is not None
    assert lookup("gone-at-provider") is None


def test_terminate_provider_failure_is_502(api_client, telephony):
    cid = post(api_client, "/api/v1/calls/initiate", {"phone_number": TARGET}).json()["connection_id"]
    telephony.fail_next(403, "Forbidden", "boom")
    body = assert_error(post(api_client, "/api/v1/calls/terminate", {"connection_id": cid}), 502)
    assert telephony.key not in body["detail"]
    assert Call.objects.get(connection_id=cid).status == "initiating"


def test_terminate_without_telephony_is_503(api_client, no_telephony):
    make_call("c1")
    assert_error(post(api_client, "/api/v1/calls/terminate", {"connection_id": "c1"}), 503)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"connection_id": ""},
        {"connection_id": None},
        {"connection_id": ["a"]},
        {"connection_id": "x" * 201},
        {"connection_id": "a", "extra": 1},
        [],
        "a",
        None,
    ],
)
def test_terminate_bad_body_is_400(api_client, telephony, body):
    assert_error(post(api_client, "/api/v1/calls/terminate", body), 400)


# --- auth, schema, admin ----------------------------------------------------------------------------------
def production(**env):
    cfg = load_config(
        {"ENVIRONMENT": "production", "SECRET_KEY": STRONG, "ALLOWED_HOSTS": "testserver", **env}
    )
    return override_settings(CONFIG=cfg, PRODUCTION=True)


def test_production_requires_the_api_key_except_for_webhooks(api_client, catalog_loaded):
    reset_telephony_client()
    with production(API_KEYS="prod-key-abcdef"):
        for method, url, body in [
            ("post", "/api/v1/calls/initiate", {"phone_number": TARGET}),
            ("get", "/api/v1/calls/", None),
            ("post", "/api/v1/calls/terminate", {"connection_id": "x"}),
        ]:
            if method == "get":
                response = api_client.get(url, secure=True)
            else:
                response = post(api_client, url, body, secure=True)
            assert_error(response, 401)
        ok = api_client.get("/api/v1/calls/", secure=True, HTTP_AUTHORIZATION="Bearer prod-key-abcdef")
        assert ok.status_code == 200
        ok = api_client.get("/api/v1/calls/", secure=True, HTTP_X_API_KEY="prod-key-abcdef")
        assert ok.status_code == 200
        # webhooks never need it: a schema-valid body is processed, a wrong key does not matter
        response = post(
            api_client,
            "/api/v1/calls/answer",
            [
                {
                    "eventType": "Microsoft.EventGrid.SubscriptionValidationEvent",
                    "data": {"validationCode": "abc"},
                }
            ],
            secure=True,
            HTTP_AUTHORIZATION="Bearer wrong",
        )
        assert response.status_code == 200 and response.json() == {"validationResponse": "abc"}
        event = {
            "id": "1",
            "source": "calling/callConnections/x",
            "type": "Microsoft.Communication.CallConnected",
            "specversion": "1.0",
            "data": {"callConnectionId": "x"},
        }
        response = post(api_client, "/api/v1/calls/callbacks", [event], secure=True)
        assert response.status_code == 200 and response.json() == {"processed": 1}


def test_schema_lists_the_call_endpoints(api_client):
    schema = api_client.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]
    assert set(paths["/api/v1/calls/initiate"]) == {"post"}
    assert "202" in paths["/api/v1/calls/initiate"]["post"]["responses"]
    assert set(paths["/api/v1/calls/"]) == {"get"}
    params = {p["name"] for p in paths["/api/v1/calls/"]["get"]["parameters"]}
    assert {"page", "page_size", "status"} <= params
    for path in ("/api/v1/calls/terminate", "/api/v1/calls/answer", "/api/v1/calls/callbacks"):
        assert "post" in paths[path]
    for path in ("/api/v1/calls/answer", "/api/v1/calls/callbacks"):
        assert not paths[path]["post"].get("security")  # anonymous
    assert paths["/api/v1/calls/initiate"]["post"]["security"]
    call = schema["components"]["schemas"]["Call"]
    assert set(call["properties"]) >= CALL_KEYS


def test_admin_lists_calls_read_only(client, django_user_model, catalog_loaded):
    user = django_user_model.objects.create_superuser("ops", "ops@example.com", "pw-123456-xyz")
    client.force_login(user)
    call = make_call("admin-call", status="disconnected", failure_reason="")
    page = client.get("/admin/calls/call/")
    assert page.status_code == 200 and b"admin-call" in page.content
    detail = client.get(f"/admin/calls/call/{call.pk}/change/")
    assert detail.status_code == 200 and b"admin-call" in detail.content
    assert client.get("/admin/calls/call/add/").status_code == 403
    assert client.post(f"/admin/calls/call/{call.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Call.objects.filter(pk=call.pk).exists()
