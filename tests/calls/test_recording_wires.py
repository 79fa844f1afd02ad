"""Recording on the phone media stream (in process): the same driver taps as the browser's, so the
caller's 8/16 kHz frames land on the left and the agent's paced audio on the right; the
scenario's announcement is said (and recorded) before the greeting."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import numpy as np
import pytest
from acs_media_client import AcsMediaClient, over_communicator, silence, tone
from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator

from calls import callmap
from calls.callmap import CallInfo
from voiceagent.config import Config
from voiceagent.recording import store
from voiceagent.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)
APP = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
RATE = 16000
CALLER_HZ = 1000.0


@pytest.fixture
def recording(settings, tmp_path, fake_runtime):
    settings.CONFIG = Config(
        {
            **settings.CONFIG,
            "RECORDING_ENABLED": True,
            "RECORDING_SAMPLE_RATE": RATE,
            "RECORDING_WRITER": "thread",
        },
        {},
    )
    settings.STORAGES = {
        **settings.STORAGES,
        "recordings": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "rec", "allow_overwrite": True},
        },
    }
    fake_runtime.tts.level = 8000  # a 300 Hz tone for every word: audible on the agent's channel
    yield tmp_path / "rec"
    fake_runtime.tts.level = 0


async def new_call(scenario: str = "banking") -> CallInfo:
    from agents_app import sessions
    from agents_app.catalog import catalog

    def create() -> str:
        spec = catalog.scenario(scenario)
        session_id = sessions.new_session_id()
        sessions.create_session(session_id, spec.name, spec.start_agent, transport="phone")
        return session_id

    session_id = await sessions.db_call(create)
    info = CallInfo(f"conn-{uuid.uuid4().hex[:12]}", session_id, scenario, "MEDIA", "inbound", "+15550100")
    await callmap.remember(info)
    return info


async def finished(folder, session_id: str, timeout: float = 10.0) -> np.ndarray:
    """The recording once its manifest says it ended: (frames, 2) int16."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        manifests = list(folder.glob(f"{session_id}/*/manifest.json"))
        if manifests and json.loads(manifests[0].read_text()).get("ended_at"):
            wav = await asyncio.to_thread(store.layout, session_id)
            data = await asyncio.to_thread(wav.read, 44, wav.size)
            return np.frombuffer(data, np.int16).reshape(-1, 2)
        await asyncio.sleep(0.1)
    raise AssertionError("the recording was not closed")


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x.astype(float) ** 2))) if len(x) else 0.0


async def test_a_phone_call_is_recorded_caller_left_agent_right(recording):
    call = await new_call()
    comm = WebsocketCommunicator(
        APP,
        "/api/v1/media/stream?events=1",
        headers=[(b"x-ms-call-connection-id", call.connection_id.encode())],
    )
    assert (await comm.connect())[0]
    client = AcsMediaClient(over_communicator(comm), rate=RATE)
    await client.metadata(RATE)
    await client.event("agent_response", final=True)
    await client.collect(1.0)  # the greeting plays out (paced)
    greeting_s = len(client.audio) / 2 / RATE
    assert greeting_s > 0.2
    await client.audio_ms(tone(600, RATE, freq=CALLER_HZ), pace=0.02)
    await client.audio_ms(silence(300, RATE), pace=0.02)
    await comm.disconnect()

    both = await finished(recording, call.session_id)
    left, right = both[:, 0], both[:, 1]
    assert rms(right[: int(greeting_s * RATE)]) > 2000  # the greeting, from the start
    spoken = np.flatnonzero(np.abs(left) > 2000)
    assert len(spoken) > 0.3 * RATE and spoken[0] >= int(greeting_s * RATE) - RATE // 10
    window = left[spoken[0] : spoken[0] + RATE // 2].astype(float)
    assert abs(np.argmax(np.abs(np.fft.rfft(window))) * RATE / len(window) - CALLER_HZ) < 10
    assert rms(left[: int(greeting_s * RATE) - RATE // 10]) < 30  # no caller audio before


async def test_the_announcement_is_said_and_recorded_before_the_greeting(recording, fake_runtime):
    from agents_app.models import Scenario

    consent = "This call is recorded for quality."

    def announce() -> None:
        Scenario.objects.filter(name="banking").update(recording_announcement=consent)

    from agents_app import sessions
    from agents_app.catalog import catalog

    await sessions.db_call(announce)
    await sessions.db_call(catalog.reload)
    call = await new_call()
    comm = WebsocketCommunicator(
        APP,
        "/api/v1/media/stream?events=1",
        headers=[(b"x-ms-call-connection-id", call.connection_id.encode())],
    )
    assert (await comm.connect())[0]
    client = AcsMediaClient(over_communicator(comm), rate=RATE)
    await client.metadata(RATE)
    said = await client.event("agent_response", final=True)
    assert said["payload"]["text"].startswith(consent + " ")
    await client.collect(1.0)
    await comm.disconnect()
    both = await finished(recording, call.session_id)
    words = len(said["payload"]["text"].split())
    assert rms(both[: int(words * 0.02 * RATE) - RATE // 20, 1]) > 2000  # all of it, on the right
