"""The recording writer process: items cross the pipe as frames, the child stores the recording
(read back as one WAV), the server's side never waits (a stalled child fills a bounded list, then
items are dropped and counted), a dead child is replaced, and chunks are counted in this process."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import wave

import numpy as np
import pytest
from prometheus_client import REGISTRY

from voiceagent.recording import store
from voiceagent.recording.recorder import Recorder
from voiceagent.recording.writer_process import FLUSH_S, ProcessWriter
from voiceagent.recording.writer_wire import encode, read_item

RATE = 16000


@pytest.fixture
def recordings(settings, tmp_path, monkeypatch):
    """The child reads its settings from the environment; this process's storage points there too."""
    folder = tmp_path / "rec"
    monkeypatch.setenv("RECORDING_DIR", str(folder))
    monkeypatch.setenv("RECORDING_CHUNK_S", "1")
    settings.STORAGES = {
        **settings.STORAGES,
        "recordings": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": folder, "allow_overwrite": True},
        },
    }
    return folder


def tone(seconds: float, rate: int = RATE, hz: float = 440.0) -> bytes:
    n = int(seconds * rate)
    return (np.sin(np.arange(n) * 2 * np.pi * hz / rate) * 8000).astype("<i2").tobytes()


def chunks_written() -> float:
    return REGISTRY.get_sample_value("voiceagent_recording_chunks_written_total") or 0.0


def test_an_item_crosses_the_wire_as_it_was():
    items = [
        ("s/r", "open", {"session_id": "s", "transport": "phone"}, 0.0, 12.5),
        ("s/r", "caller", tone(0.02), 8000.0, 13.25),
        ("s/r", "gain", b"", -20.0, 14.0),
        ("s/r", "close", b"", 0.0, 15.0),
    ]
    stream = io.BytesIO(b"".join(encode(item) for item in items))
    assert [read_item(stream) for _ in items] == items
    assert read_item(stream) is None
    assert read_item(io.BytesIO(encode(items[1])[:-3])) is None  # a frame cut short ends the stream


async def test_the_child_stores_the_recording_and_this_process_counts_its_chunks(recordings):
    sink = ProcessWriter(queue_max=100)
    before = chunks_written()
    recorder = Recorder("call-p", "phone", sink=sink)
    recorder.agent(tone(0.5, 24000, 300), 24000)
    for _ in range(10):  # 2 s of the caller in 20 ms frames, at a quarter of real time
        for _ in range(10):
            recorder.caller(tone(0.02), RATE)
        await asyncio.sleep(0.05)
    recorder.close()
    await sink.aclose(10)
    manifest = json.loads(next(recordings.glob("call-p/*/manifest.json")).read_text())
    assert manifest["ended_at"] and manifest["transport"] == "phone" and manifest["chunks"] >= 1
    layout = store.layout("call-p")
    assert layout is not None
    with wave.open(io.BytesIO(layout.read(0, layout.size))) as w:
        assert w.getnchannels() == 2 and w.getnframes() >= 2 * RATE
    assert chunks_written() - before == manifest["chunks"]


async def test_a_stalled_child_costs_the_loop_nothing_then_items_are_dropped_and_counted(recordings):
    sink = ProcessWriter(queue_max=8)
    recorder = Recorder("call-stalled", "browser", sink=sink)
    os.kill(sink._proc.pid, signal.SIGSTOP)  # the writer cannot keep up at all
    try:
        second = tone(1.0)
        for _ in range(40):  # 40 s of caller audio: far more than the pipe and 8 items hold
            recorder.caller(second, RATE)
        assert recorder.dropped > 0 and len(sink._pending) <= 8
        dropped = recorder.dropped
        recorder.close()  # a close is never dropped: written at once, or queued behind the rest
        assert recorder.dropped == dropped
        assert not sink._pending or read_item(io.BytesIO(bytes(sink._pending[-1])))[1] == "close"
    finally:
        os.kill(sink._proc.pid, signal.SIGCONT)
    await sink.aclose(10)
    manifest = json.loads(next(recordings.glob("call-stalled/*/manifest.json")).read_text())
    assert manifest["ended_at"]  # the close got through


async def test_a_child_that_died_is_replaced_by_the_next_item(recordings, caplog):
    sink = ProcessWriter(queue_max=100)
    Recorder("call-a", "browser", sink=sink).close()
    first = sink._proc
    first.kill()
    first.wait(5)
    recorder = Recorder("call-b", "browser", sink=sink)
    recorder.caller(tone(0.5), RATE)
    recorder.close()
    assert sink._proc is not first and "starting another" in caplog.text
    await sink.aclose(10)
    assert next(recordings.glob("call-b/*/manifest.json"))


async def test_items_go_down_the_pipe_together_not_one_write_each(recordings):
    """Each write wakes the child: at 200 conversations one write per item woke it ~400 times a
    second, each time taking a core from the event loop (bench_capacity --recording)."""
    sink = ProcessWriter(queue_max=100)
    recorder = Recorder("call-batched", "browser", sink=sink)
    for _ in range(5):
        recorder.caller(tone(1.0), RATE)  # five 1 s items: five writes before
    assert len(sink._pending) == 6  # the open and the five items, gathered
    await asyncio.sleep(FLUSH_S * 3)
    assert not sink._pending  # gone together within FLUSH_S
    recorder.close()
    await sink.aclose(10)
    layout = store.layout("call-batched")
    assert layout is not None
    with wave.open(io.BytesIO(layout.read(0, layout.size))) as w:
        assert w.getnframes() >= 5 * RATE
