"""The recording writer: chunks stored while the call goes on, the manifest, a full queue that
drops and counts instead of waiting, a storage that fails said once; read back as one WAV."""

from __future__ import annotations

import io
import json
import logging
import time
import wave

import numpy as np
import pytest
from prometheus_client import REGISTRY

from voiceagent.recording import store
from voiceagent.recording.recorder import Recorder
from voiceagent.recording.writer import RecordingWriter, storage

RATE = 16000


@pytest.fixture
def recordings(settings, tmp_path):
    settings.STORAGES = {
        **settings.STORAGES,
        "recordings": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "rec", "allow_overwrite": True},
        },
    }
    return tmp_path / "rec"


def tone(seconds: float, rate: int = RATE, hz: float = 440.0) -> bytes:
    n = int(seconds * rate)
    return (np.sin(np.arange(n) * 2 * np.pi * hz / rate) * 8000).astype("<i2").tobytes()


def test_chunks_are_stored_while_the_call_goes_on_and_read_back_as_one_wav(recordings, tmp_path):
    sink = RecordingWriter(queue_max=100, chunk_s=1, rate=RATE)
    recorder = Recorder("call-1", "browser", sink=sink)
    recorder.agent(tone(0.5, 24000, 300), 24000)  # the greeting, at the synthesiser's rate
    for _ in range(15):  # 3.6 s of the caller, in real time, 20 ms frames at 8 kHz (a phone)
        for _ in range(12):
            recorder.caller(tone(0.02, 8000, 1000), 8000)
        time.sleep(0.2)
    time.sleep(0.2)  # the writer's housekeeping
    chunks = sorted(recordings.glob("call-1/*/*.pcm"))
    assert len(chunks) >= 1, "nothing was stored while the call went on"
    manifest = json.loads(next(recordings.glob("call-1/*/manifest.json")).read_text())
    assert manifest["ended_at"] is None and manifest["transport"] == "browser"
    assert manifest["channels"] == ["caller", "agent"] and manifest["sample_rate"] == RATE
    so_far = store.layout("call-1")  # a worker that died now would leave this behind: it plays
    assert so_far is not None and so_far.data_bytes == sum(p.stat().st_size for p in chunks) > 0
    with wave.open(io.BytesIO(so_far.read(0, so_far.size))) as w:
        assert w.getnframes() * 4 == so_far.data_bytes
    recorder.close()
    sink.stop()
    manifest = json.loads(next(recordings.glob("call-1/*/manifest.json")).read_text())
    assert manifest["ended_at"] and manifest["chunks"] == len(list(recordings.glob("call-1/*/*.pcm")))
    assert manifest["bytes"] == sum(p.stat().st_size for p in recordings.glob("call-1/*/*.pcm"))

    wav = store.layout("call-1")
    assert wav is not None and wav.size == 44 + manifest["bytes"]
    path = tmp_path / "call.wav"
    path.write_bytes(wav.read(0, wav.size))
    with wave.open(str(path)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (2, 2, RATE)
        both = np.frombuffer(w.readframes(w.getnframes()), np.int16).reshape(-1, 2).astype(float)
    assert 3.4 * RATE < len(both) < 4.4 * RATE
    left, right = both[:, 0], both[:, 1]
    assert np.sqrt(np.mean(left[RATE : 2 * RATE] ** 2)) > 3000  # the caller talks all along
    assert np.sqrt(np.mean(right[: RATE // 2] ** 2)) > 3000  # the greeting, heard first
    assert np.sqrt(np.mean(right[RATE:] ** 2)) < 50  # then nothing from the agent
    assert wav.read(10, 30) == path.read_bytes()[10:30]  # a range across the header and the data
    assert wav.read(wav.size - 7, wav.size + 100) == path.read_bytes()[-7:]


def test_a_full_queue_drops_and_counts_and_never_waits(recordings, caplog):
    sink = RecordingWriter(queue_max=10, chunk_s=1, rate=RATE)
    sink._start = lambda: None  # no thread: nothing empties the queue
    before = REGISTRY.get_sample_value("voiceagent_recording_dropped_total") or 0.0
    recorder = Recorder("busy", "phone", sink=sink)  # the open is one item
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, "voiceagent.recording"):
        for _ in range(15):
            recorder.gain(-20.0)  # one item each (agent audio would be gathered)
        recorder.close()
    assert time.monotonic() - started < 0.1
    assert recorder.dropped == 6
    assert REGISTRY.get_sample_value("voiceagent_recording_dropped_total") - before == 6
    assert sum("queue is full" in r.getMessage() for r in caplog.records) == 1  # said once
    assert len(sink.late) == 1  # the close waits for room instead of being lost
    while not sink.queue.empty():
        sink.handle(sink.queue.get_nowait())
    sink._housekeeping()  # the queue is empty now: the late close applies
    manifest = json.loads(next(recordings.glob("busy/*/manifest.json")).read_text())
    assert manifest["ended_at"] and manifest["chunks"] == 0  # no audio was kept, but it is closed


def test_a_failing_storage_is_said_once_and_the_call_goes_on(settings, tmp_path, caplog):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    settings.STORAGES = {
        **settings.STORAGES,
        "recordings": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": blocker, "allow_overwrite": True},
        },
    }
    sink = RecordingWriter(queue_max=100, chunk_s=1, rate=RATE)
    with caplog.at_level(logging.ERROR, "voiceagent.recording"):
        t = time.monotonic()
        sink.handle(("s/r", "open", {"session_id": "s"}, 0, t))
        sink.handle(("s/r", "caller", tone(1.0), RATE, t + 1))
        sink.handle(("s/r", "close", b"", 0, t + 1))
    failures = [r for r in caplog.records if "storing" in r.getMessage()]
    assert len(failures) == 1 and failures[0].levelno == logging.ERROR
    assert not storage().exists("s")


def test_a_session_id_that_cannot_name_a_folder_is_not_recorded(recordings):
    sink = RecordingWriter(queue_max=10, chunk_s=1, rate=RATE)
    sink._start = lambda: None
    recorder = Recorder("..", "browser", sink=sink)
    recorder.caller(tone(0.5), RATE)
    recorder.close()
    assert sink.queue.empty() and not sink.late


def test_agent_audio_is_gathered_while_it_comes_back_to_back_and_a_gap_stays_a_gap(recordings):
    sink = RecordingWriter(queue_max=100, chunk_s=1, rate=RATE)
    sink._start = lambda: None
    recorder = Recorder("gather", "browser", sink=sink)
    sink.queue.get_nowait()  # the open
    chunk = tone(0.02, 24000)
    for _ in range(5):  # a line arrives faster than it plays: one item, later
        recorder.agent(chunk, 24000)
    assert sink.queue.empty()
    for _ in range(45):  # AGENT_ITEM_S (1 s) gathered: out it goes
        recorder.agent(chunk, 24000)
    first = sink.queue.get_nowait()
    assert first[1] == "agent" and len(first[2]) == 50 * len(chunk)
    recorder.agent(chunk, 24000)
    time.sleep(0.05)  # it has played: the next chunk comes after a gap, in an item of its own
    recorder.agent(chunk, 24000)
    gathered = sink.queue.get_nowait()
    assert len(gathered[2]) == len(chunk)
    recorder.cut()  # a cut sends what was gathered first
    kinds = [sink.queue.get_nowait()[1:3] for _ in range(2)]
    assert kinds == [("agent", chunk), ("cut", b"")]
    recorder.agent(chunk, 24000)
    recorder.flush()
    assert sink.queue.get_nowait()[2] == chunk
