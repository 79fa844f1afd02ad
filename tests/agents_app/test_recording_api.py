"""GET /api/v1/sessions/{id}/recording: the WAV (header and both channels), byte ranges (206,
416, malformed = whole), 404 without a recording, 409 while the conversation is live, and the
admin conversation viewer's player."""

from __future__ import annotations

import io
import os
import time
import wave

import numpy as np
import pytest

from voiceagent.recording.writer import RecordingWriter
from voiceagent.transport.live import live_sessions

pytestmark = pytest.mark.django_db(transaction=True)
RATE = 16000
URL = "/api/v1/sessions/{}/recording"


@pytest.fixture
def recordings(settings, tmp_path):
    settings.STORAGES = {
        **settings.STORAGES,
        "recordings": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "rec", "allow_overwrite": True},
        },
    }
    yield tmp_path / "rec"
    live_sessions.reset()


def tone(seconds: float, hz: float) -> bytes:
    n = int(seconds * RATE)
    return (np.sin(np.arange(n) * 2 * np.pi * hz / RATE) * 8000).astype("<i2").tobytes()


def record(session_id: str, rid: str = "20261128T000000000Z-abcd") -> None:
    """One second of the agent, then one of the caller, written as the writer thread would."""
    sink = RecordingWriter(queue_max=100, chunk_s=1, rate=RATE)
    name, t = f"{session_id}/{rid}", 1000.0
    sink.handle((name, "open", {"session_id": session_id, "transport": "browser"}, 0, t))
    sink.handle((name, "agent", tone(1.0, 300), RATE, t))
    sink.handle((name, "caller", tone(1.0, 1000), RATE, t + 2.0))
    sink.handle((name, "close", b"", 0, t + 2.0))


async def body(response) -> bytes:
    return b"".join([piece async for piece in response.streaming_content])


async def test_the_wav_has_the_caller_left_and_the_agent_right(async_client, recordings):
    record("rec-1")
    response = await async_client.get(URL.format("rec-1"))
    assert response.status_code == 200
    assert response["Content-Type"] == "audio/wav" and response["Accept-Ranges"] == "bytes"
    data = await body(response)
    assert int(response["Content-Length"]) == len(data) == 44 + 2 * RATE * 4
    with wave.open(io.BytesIO(data)) as w:
        shape = (w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes())
        assert shape == (2, 2, RATE, 2 * RATE)
        both = np.frombuffer(w.readframes(w.getnframes()), np.int16).reshape(-1, 2).astype(float)
    rms = lambda x: float(np.sqrt(np.mean(x**2)))  # noqa: E731
    assert rms(both[:RATE, 1]) > 3000 and rms(both[:RATE, 0]) < 10  # the agent first
    assert rms(both[RATE:, 0]) > 3000 and rms(both[RATE + 100 :, 1]) < 10  # then the caller


async def test_a_restarted_conversation_plays_after_the_first(async_client, recordings):
    record("rec-twice", "20261128T000001000Z-bbbb")
    record("rec-twice", "20261128T000000000Z-aaaa")
    data = await body(await async_client.get(URL.format("rec-twice")))
    with wave.open(io.BytesIO(data)) as w:
        assert w.getnframes() == 4 * RATE
        both = np.frombuffer(w.readframes(w.getnframes()), np.int16).reshape(-1, 2)
    assert (
        np.abs(both[: RATE - 100, 1]).max() > 5000 and np.abs(both[2 * RATE : 3 * RATE - 100, 1]).max() > 5000
    )


@pytest.mark.parametrize(
    ("header", "status", "span"),
    [
        ("bytes=0-99", 206, (0, 100)),
        ("bytes=100-", 206, (100, None)),
        ("bytes=-10", 206, (-10, None)),
        ("bytes=40-10000000", 206, (40, None)),
        ("bytes = 4-7", 206, (4, 8)),
        ("bytes=0-1,5-9", 200, (0, None)),  # several ranges: the whole file
        ("bytes=9-1", 200, (0, None)),  # invalid: ignored
        ("pages=1-2", 200, (0, None)),
        ("garbage", 200, (0, None)),
        ("bytes=-", 200, (0, None)),
    ],
)
async def test_ranges(async_client, recordings, header, status, span):
    record("rec-2")
    whole = await body(await async_client.get(URL.format("rec-2")))
    response = await async_client.get(URL.format("rec-2"), headers={"Range": header})
    assert response.status_code == status
    expected = whole[span[0] : span[1]]
    assert await body(response) == expected and int(response["Content-Length"]) == len(expected)
    if status == 206:
        start = len(whole) - len(expected)
        start = span[0] if span[0] >= 0 else start
        assert response["Content-Range"] == f"bytes {start}-{start + len(expected) - 1}/{len(whole)}"


@pytest.mark.parametrize("header", ["bytes=999999999-", "bytes=-0"])
async def test_an_unsatisfiable_range_is_416_with_a_detail(async_client, recordings, header):
    record("rec-3")
    response = await async_client.get(URL.format("rec-3"), headers={"Range": header})
    assert response.status_code == 416
    assert response["Content-Range"] == f"bytes */{44 + 2 * RATE * 4}"
    assert "Range not satisfiable" in response.json()["detail"]


async def test_no_recording_is_404_and_a_live_conversation_409(async_client, recordings):
    started = time.monotonic()
    for sid in ("nobody", "..", "no.such:session"):
        response = await async_client.get(URL.format(sid))
        assert response.status_code == 404 and response.json()["detail"]
    assert time.monotonic() - started < 1.0  # the OpenAPI fuzz sends many of these
    record("rec-live")
    live_sessions.observe({"type": "event", "session_id": "rec-live", "payload": {"name": "session_started"}})
    response = await async_client.get(URL.format("rec-live"))
    assert response.status_code == 409 and "live" in response.json()["detail"]
    live_sessions.observe({"type": "event", "session_id": "rec-live", "payload": {"name": "session_ended"}})
    assert (await async_client.get(URL.format("rec-live"))).status_code == 200


async def test_an_ended_conversation_whose_recording_is_still_being_written_is_409(async_client, recordings):
    """The writer stores the last chunk and closes the manifest after the conversation ended: a WAV
    served before that would miss its last seconds. A writer that died never closes it: once its
    files are old, the recording plays as it is."""
    sink = RecordingWriter(queue_max=100, chunk_s=1, rate=RATE)
    name = "rec-writing/20261128T000000000Z-abcd"
    sink.handle((name, "open", {"session_id": "rec-writing", "transport": "browser"}, 0, 1000.0))
    sink.handle((name, "caller", tone(1.0, 1000), RATE, 1001.0))
    part = sink._parts[name]
    sink._store(part, part.timeline.take(None))  # a chunk stored, the close not yet
    response = await async_client.get(URL.format("rec-writing"))
    assert response.status_code == 409 and "being written" in response.json()["detail"]
    long_ago = time.time() - 3600
    for path in (recordings / "rec-writing").rglob("*"):
        os.utime(path, (long_ago, long_ago))
    response = await async_client.get(URL.format("rec-writing"))
    assert response.status_code == 200 and len(await body(response)) == 44 + RATE * 4


def test_the_schema_documents_the_endpoint(api_client):
    schema = api_client.get("/api/v1/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/sessions/{session_id}/recording"]["get"]
    assert {"200", "206", "404", "409", "416"} <= set(operation["responses"])
    assert "audio/wav" in operation["responses"]["200"]["content"]
    assert any(p["name"] == "Range" and p["in"] == "header" for p in operation["parameters"])


def test_the_admin_viewer_plays_the_recording(client, django_user_model, recordings):
    from agents_app.models import Session

    Session.objects.create(session_id="rec:admin", scenario="banking", transport="browser")
    Session.objects.create(session_id="silent", scenario="banking", transport="browser")
    record("rec:admin")
    client.force_login(django_user_model.objects.create_superuser("v", "v@example.com", "pw-123456-xyz"))
    page = client.get("/admin/agents_app/session/rec_3Aadmin/change/").content.decode()
    assert '<audio controls preload="none" src="/admin/agents_app/session/rec_3Aadmin/recording/">' in page
    assert "<audio" not in client.get("/admin/agents_app/session/silent/change/").content.decode()
    response = client.get("/admin/agents_app/session/rec_3Aadmin/recording/", headers={"Range": "bytes=0-3"})
    assert response.status_code == 206 and response["Content-Type"] == "audio/wav"
    client.logout()
    assert client.get("/admin/agents_app/session/rec_3Aadmin/recording/").status_code == 302  # to the login
