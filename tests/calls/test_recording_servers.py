"""Recording over a real server: a browser conversation with RECORDING_ENABLED=true, then its WAV
from GET /api/v1/sessions/{id}/recording, with the caller on the left channel and the agent's
greeting (as played) on the right; a barge-in's cut is silence on the right from when it cut."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
import wave

import httpx
import numpy as np
import pytest
import websockets
from servers import base_env, free_port, migrate, start, stop_all, wait_http
from voices import Voice, pcm16

pytestmark = [pytest.mark.slow]

RATE = 16000
FRAME_S = 0.02
CALLER_HZ = 1000.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("recording")
    env = base_env(
        tmp_path,
        RECORDING_ENABLED="true",
        RECORDING_DIR=str(tmp_path / "recordings"),
        RECORDING_CHUNK_S="1",
        STT_POOL_SIZE="1",
        TTS_POOL_SIZE="1",
    )
    migrate(env)
    port = free_port()
    log = tmp_path / "server.log"
    proc = start("uvicorn", port, env, log)
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v1/ready", 60, 200)
        yield f"127.0.0.1:{port}", tmp_path / "recordings"
    finally:
        stop_all([proc], [log], within_s=30)


def caller_frame(index: int) -> bytes:
    n = int(RATE * FRAME_S)
    t = (np.arange(n) + index * n) / RATE
    return (np.sin(2 * np.pi * CALLER_HZ * t) * 8000).astype("<i2").tobytes()


async def converse(host: str) -> tuple[str, float]:
    """The greeting is played out, then the caller speaks 1.5 s of a 1 kHz tone and hangs up;
    (session id, seconds of greeting audio received)."""
    async with websockets.connect(f"ws://{host}/api/v1/browser/conversation", max_size=2**24) as ws:
        greeting_s = 0.0
        first_audio = 0.0  # when the greeting's first audio came: its playback starts then
        session_id = ""

        async def until(predicate, timeout: float = 30.0) -> dict:
            nonlocal greeting_s, first_audio
            async with asyncio.timeout(timeout):
                while True:
                    message = json.loads(await ws.recv())
                    if message["type"] == "audio":
                        first_audio = first_audio or time.monotonic()
                        pcm = base64.b64decode(message["payload"]["data"])
                        greeting_s += len(pcm) / 2 / message["payload"]["sample_rate"]
                    if predicate(message):
                        return message

        started = await until(
            lambda m: m["type"] == "event" and m["payload"].get("name") == "session_started"
        )
        session_id = started["session_id"]
        config = {"scenario": "banking", "sample_rate": RATE, "output_sample_rate": RATE}
        await ws.send(json.dumps({"type": "config", "payload": config}))
        await ws.send(json.dumps({"type": "control", "payload": {"action": "start"}}))
        await until(lambda m: m["type"] == "response" and m["payload"].get("final"))
        await until(lambda m: m["type"] == "event" and m["payload"].get("state") == "listening")
        assert greeting_s > 0.5, "no greeting audio came"
        # it has played (counted from its first audio, which a loaded server sends late)
        await asyncio.sleep(max(0.0, first_audio + greeting_s + 0.5 - time.monotonic()))
        for index in range(int(1.5 / FRAME_S)):  # real time, as a microphone sends
            await ws.send(caller_frame(index))
            await asyncio.sleep(FRAME_S)
    return session_id, greeting_s


def fetch_wav(host: str, session_id: str) -> bytes:
    """The recording once the conversation has ended and its last chunk is stored."""
    url = f"http://{host}/api/v1/sessions/{session_id}/recording"
    deadline = time.monotonic() + 20
    last = b""
    while time.monotonic() < deadline:
        answer = httpx.get(url, timeout=10)
        if answer.status_code == 200 and answer.content == last and len(last) > 44:
            return last
        last = answer.content if answer.status_code == 200 else b""
        time.sleep(0.5)
    raise AssertionError(f"no stable recording: {answer.status_code} {answer.text[:200]}")


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x.astype(float) ** 2))) if len(x) else 0.0


def test_a_browser_conversation_is_recorded_caller_left_agent_right(server):
    host, folder = server
    session_id, greeting_s = asyncio.run(converse(host))
    data = fetch_wav(host, session_id)
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (2, 2, RATE)
        both = np.frombuffer(w.readframes(w.getnframes()), np.int16).reshape(-1, 2)
    left, right = both[:, 0], both[:, 1]
    assert len(both) / RATE >= greeting_s + 1.3

    # the agent's greeting on the right, while the caller (no frames yet) is silent on the left
    greeting = slice(0, int(greeting_s * RATE))
    assert rms(right[greeting]) > 300 and rms(left[greeting]) < 30
    # the caller's tone on the left, at its pitch; the agent silent meanwhile
    speaking = np.flatnonzero(np.abs(left) > 2000)
    assert len(speaking) > 0.5 * 1.5 * RATE, "the caller's tone is not on the left channel"
    first = speaking[0]
    assert first >= int((greeting_s - 0.1) * RATE)  # after the greeting, as it was heard
    tone = left[first : first + RATE].astype(float)
    peak_hz = np.argmax(np.abs(np.fft.rfft(tone))) * RATE / len(tone)
    assert abs(peak_hz - CALLER_HZ) < 10
    assert rms(right[first : first + int(0.5 * RATE)]) < 30

    # stored in chunks under RECORDING_DIR, with its manifest closed
    manifest = json.loads(next(folder.glob(f"{session_id}/*/manifest.json")).read_text())
    assert manifest["ended_at"] and manifest["transport"] == "browser" and manifest["chunks"] >= 2


async def barge_in(host: str) -> tuple[str, float, float, float]:
    """The caller speaks over the greeting until it is cut; (session id, seconds of greeting sent,
    seconds from the start to the cut, seconds from the start to the end of the caller's speech).
    Words, not a tone: a pure tone is noise to the recogniser (its hypotheses are guesses), so the
    agent is only ducked under it and held at NOISE_MAX_MS (3 s), near the greeting's end. The
    caller goes on 1.5 s past the cut: on a loaded machine the recording ends ~0.4 s behind the
    wall clock, and 0.5 s of the agent's channel after the cut must be in it."""
    frame_bytes = int(RATE * FRAME_S) * 2
    words = pcm16("wait, stop, I have a different question about my card", Voice("en-gb", 190))
    words += bytes(-len(words) % frame_bytes)
    frames = [words[i : i + frame_bytes] for i in range(0, len(words), frame_bytes)]
    async with websockets.connect(f"ws://{host}/api/v1/browser/conversation", max_size=2**24) as ws:
        sent_s, cut_at = 0.0, None
        started = json.loads(await ws.recv())
        config = {"scenario": "banking", "sample_rate": RATE, "output_sample_rate": RATE}
        await ws.send(json.dumps({"type": "config", "payload": config}))
        await ws.send(json.dumps({"type": "control", "payload": {"action": "start"}}))
        began = time.monotonic()

        async def listen() -> None:
            nonlocal sent_s, cut_at
            async for raw in ws:
                message = json.loads(raw)
                if message["type"] == "audio" and cut_at is None:
                    sent_s += len(base64.b64decode(message["payload"]["data"])) / 2 / RATE
                elif message["type"] == "event" and message["payload"].get("name") == "barge_in":
                    cut_at = time.monotonic() - began

        listener = asyncio.create_task(listen())
        # speak once the greeting has begun: a loaded machine synthesises its first sentence late,
        # and the caller's words must be judged within the greeting's ~2.9 s
        async with asyncio.timeout(30):
            while not sent_s:
                await asyncio.sleep(0.01)
        index = 0
        while (cut_at is None or time.monotonic() - began < cut_at + 1.5) and index < 400:
            await ws.send(frames[index % len(frames)])
            index += 1
            await asyncio.sleep(FRAME_S)
        speech_end = time.monotonic() - began
        listener.cancel()
        assert cut_at is not None, "the greeting was never cut"
        return started["session_id"], sent_s, cut_at, speech_end


def test_a_barge_in_cuts_the_agent_channel_where_it_was_cut(server):
    host, _ = server
    session_id, sent_s, cut_at, speech_end = asyncio.run(barge_in(host))
    assert sent_s > cut_at + 0.5, "the greeting was too short to be cut"  # more was sent than heard
    data = fetch_wav(host, session_id)
    with wave.open(io.BytesIO(data)) as w:
        both = np.frombuffer(w.readframes(w.getnframes()), np.int16).reshape(-1, 2)
    right = both[:, 1]
    assert rms(right[int(0.1 * RATE) : int((cut_at - 0.3) * RATE)]) > 300  # the greeting, until the cut
    after = right[int((cut_at + 0.1) * RATE) : int(speech_end * RATE)]
    assert len(after) > 0.5 * RATE and rms(after) < 30  # nothing of it after the cut
