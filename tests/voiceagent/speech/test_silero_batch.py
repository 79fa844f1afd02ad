"""BatchedSileroVAD + SileroBatcher: the real Silero v6 model judging several conversations' frames
in one batched call per tick on its own thread, with the same verdicts as one model call per stream,
in order, verdicts back on the loop; the engine's listening side uses it (no inference on the loop's
thread); a conversation closing mid-batch; a full stream drops and counts."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading

import numpy as np
import pytest
from test_silero_vad import _conversation, _espeak, _frames, _noise

from voiceagent.conversation.testing import ScriptedSTT
from voiceagent.speech.audio import generate_tone, pcm16_to_bytes, resample, silence
from voiceagent.speech.silero_batch import BatchedSileroVAD, SileroBatcher
from voiceagent.speech.silero_vad import SileroVAD, shared_session

SENTENCES = ("Hello, I would like to check the balance of my account.", "Yes, that is me.")


class ThreadRecordingSession:
    """The real onnxruntime session, noting which threads call it and the batch sizes."""

    def __init__(self) -> None:
        self.real = shared_session()
        self.threads: set[int] = set()
        self.batches: list[int] = []

    def run(self, outputs, feed):
        self.threads.add(threading.get_ident())
        self.batches.append(int(feed["input"].shape[0]))
        return self.real.run(outputs, feed)


@pytest.fixture(scope="module")
def sounds() -> list[bytes]:
    """Four streams' audio: two spoken sentences (espeak-ng), loud noise, a tone; with pauses."""
    pad = pcm16_to_bytes(silence(16000, 300))
    speech = [pad + asyncio.run(_espeak(text)) + pad for text in SENTENCES]
    tone = pcm16_to_bytes(generate_tone(16000, 1500, 440, amplitude=0.3))
    return [speech[0], speech[1] + speech[0], _noise(16000 * 2, -20.0, seed=3), pad + tone + pad]


@pytest.fixture
def batcher():
    made = SileroBatcher(ThreadRecordingSession(), tick_s=0.02)
    yield made
    made.stop()


async def _until(condition, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


@pytest.mark.slow
async def test_batched_verdicts_equal_one_model_call_per_stream_in_order(sounds, batcher):
    """Frames of four streams, submitted interleaved and in bursts (so a stream can have two windows
    due in one tick): each stream's verdicts (and final model state) equal SileroVAD run on it alone,
    delivered in submission order, on the loop's thread; the model ran batches of several rows on
    the batcher's thread only."""
    alone, alone_vads = [], []
    for audio in sounds:
        vad = SileroVAD()
        alone.append([vad.is_speech(f) for f in _frames(audio)])
        alone_vads.append(vad)
    streams = [BatchedSileroVAD(batcher=batcher, max_pending=10_000) for _ in sounds]
    got: list[list[tuple[bytes, bool]]] = [[] for _ in sounds]
    delivered_on: set[int] = set()

    def collector(i: int):
        def on_verdict(frame: bytes, speech: bool) -> None:
            delivered_on.add(threading.get_ident())
            got[i].append((frame, speech))

        return on_verdict

    frames = [_frames(audio) for audio in sounds]
    callbacks = [collector(i) for i in range(len(sounds))]
    longest = max(len(f) for f in frames)
    for start in range(0, longest, 3):  # a burst of 3 frames per stream, then a yield to the loop
        for i, stream_frames in enumerate(frames):
            for frame in stream_frames[start : start + 3]:
                streams[i].submit(frame, callbacks[i])
        await asyncio.sleep(0)
    await _until(lambda: all(len(g) == len(f) for g, f in zip(got, frames, strict=True)))

    for i, stream_frames in enumerate(frames):
        assert [frame for frame, _ in got[i]] == stream_frames  # every frame, in order
        assert [speech for _, speech in got[i]] == alone[i]
        # the same windows ran, and the recurrent state after them matches the stream run alone
        assert streams[i].windows_run == alone_vads[i].windows_run
        np.testing.assert_allclose(streams[i]._state, alone_vads[i]._state, atol=1e-5)
    assert any(speech for _, speech in got[0]) and any(speech for _, speech in got[1])
    assert not any(speech for _, speech in got[2]) and not any(speech for _, speech in got[3])
    session = batcher.session
    assert session.threads == {batcher.thread_id} != {threading.get_ident()}
    assert delivered_on == {threading.get_ident()}
    assert max(session.batches) > 1 and batcher.largest_batch == max(session.batches)
    assert batcher.windows == sum(session.batches)
    assert batcher.frames + batcher.frames_inline == sum(len(f) for f in frames)
    assert batcher.model_calls < batcher.windows and batcher.frames_dropped == 0


async def test_a_frame_the_model_need_not_hear_never_leaves_the_loop(sounds, batcher):
    """Frames in real time (a yield after each stream's frame): one that completes no window, or
    only a window under the energy gate, is answered in ``submit`` itself when nothing of its stream
    is in flight; only loud windows reach the worker. The verdicts and the model's state are those
    of the stream run alone, and the quiet stream never wakes the thread."""
    quiet = pcm16_to_bytes(silence(16000, 1000)) + _noise(16000, -60.0, seed=5)
    audio = [sounds[0], quiet]
    alone = []
    for one in audio:
        vad = SileroVAD()
        alone.append(([vad.is_speech(f) for f in _frames(one)], vad))
    streams = [BatchedSileroVAD(batcher=batcher) for _ in audio]
    got: list[list[bool]] = [[], []]
    at_once: list[int] = [0, 0]
    for i, (stream, one) in enumerate(zip(streams, audio, strict=True)):
        for frame in _frames(one):
            before = len(got[i])
            stream.submit(frame, lambda frame, speech, i=i: got[i].append(speech))
            at_once[i] += len(got[i]) - before
            await _until(lambda i=i, stream=stream: stream.in_flight == 0)
    for i, one in enumerate(audio):
        assert got[i] == alone[i][0]
        assert streams[i].windows_run == alone[i][1].windows_run
        np.testing.assert_allclose(streams[i]._state, alone[i][1]._state, atol=1e-5)
    total = [len(_frames(one)) for one in audio]
    assert at_once[1] == total[1]  # the quiet line: every verdict given in submit
    assert 0 < at_once[0] < total[0] and any(got[0])  # the sentence: its loud windows on the thread
    assert batcher.frames_inline == sum(at_once) and batcher.frames == total[0] - at_once[0]
    assert batcher.windows == streams[0].windows_run == sum(batcher.session.batches)
    assert batcher.session.threads == {batcher.thread_id}


async def test_past_inline_streams_every_frame_goes_to_the_worker(sounds):
    """Many conversations on the thread: a tick's batch amortises the hop and the loop is the scarce
    core, so past ``inline_streams`` live streams even a quiet frame is judged on the worker."""
    batcher = SileroBatcher(ThreadRecordingSession(), tick_s=0.0, inline_streams=1)
    try:
        first, second = BatchedSileroVAD(batcher=batcher), BatchedSileroVAD(batcher=batcher)
        quiet = _frames(pcm16_to_bytes(silence(16000, 200)))
        got: list[bool] = []
        for frame in quiet:
            first.submit(frame, lambda frame, speech: got.append(speech))
        assert len(got) == len(quiet) and batcher.frames_inline == len(quiet)  # alone: in submit
        second.submit(quiet[0], lambda frame, speech: got.append(speech))  # two live streams now
        for frame in quiet:
            first.submit(frame, lambda frame, speech: got.append(speech))
        assert batcher.frames_inline == len(quiet) and first.in_flight == len(quiet)
        await _until(lambda: len(got) == 2 * len(quiet) + 1)
        assert not any(got) and batcher.frames == len(quiet) + 1
        del second  # a conversation gone: the first takes its frames on the loop again
        gc.collect()
        first.submit(quiet[0], lambda frame, speech: got.append(speech))
        assert batcher.frames_inline == len(quiet) + 1
    finally:
        batcher.stop()


@pytest.mark.slow
async def test_the_engine_never_runs_the_model_on_its_loop(sounds, batcher):
    """Two conversations over one batcher, 8 kHz phone audio through the engine: both hear their
    sentence and end the turn; every model call ran on the batcher's thread."""
    phone = resample(np.frombuffer(sounds[0], "<i2"), 16000, 8000).astype("<i2").tobytes()
    convs, events = [], []
    for _ in range(2):
        conv = _conversation(BatchedSileroVAD(batcher=batcher), ScriptedSTT(["what is my balance"]))
        await conv.start()
        convs.append(conv)
        seen: list = []
        events.append(seen)

        async def read(conv=conv, seen=seen):
            async for event in conv.events():
                seen.append(event)

        asyncio.get_running_loop().create_task(read())
    for i in range(0, len(phone), 320):
        for conv in convs:
            assert conv.push_audio(phone[i : i + 320], 8000)
        await asyncio.sleep(0)
    for _ in range(40):
        for conv in convs:
            conv.push_audio(bytes(320), 8000)
        await asyncio.sleep(0.005)

    def finals(seen):
        return [e.text for e in seen if e.kind == "Transcript" and e.final and e.speaker == "user"]

    await _until(lambda: all(finals(seen) for seen in events))
    assert [finals(seen) for seen in events] == [["what is my balance"]] * 2
    assert batcher.session.threads == {batcher.thread_id} != {threading.get_ident()}
    assert all(conv.vad.windows_run > 0 for conv in convs)
    for conv in convs:
        await conv.close()


@pytest.mark.slow
async def test_a_conversation_closing_mid_batch(sounds, batcher, caplog):
    """One conversation closes with its speech frames still being judged: its verdicts are ignored
    (no utterance, no error) and the other conversation on the same batcher gets its turn."""
    gone = _conversation(BatchedSileroVAD(batcher=batcher), ScriptedSTT(["never"]))
    stays = _conversation(BatchedSileroVAD(batcher=batcher), ScriptedSTT(["what is my balance"]))
    seen: list = []
    for conv in (gone, stays):
        await conv.start()

    async def read():
        async for event in stays.events():
            seen.append(event)

    reader = asyncio.get_running_loop().create_task(read())
    caplog.set_level(logging.WARNING)
    frames = _frames(sounds[0])
    for frame in frames:  # all at once: the verdicts are still to come when ``gone`` closes
        gone.push_audio(frame)
        stays.push_audio(frame)
    # its speech not judged yet (no yield to the loop so far; the silence before it was, in submit)
    assert gone.vad.in_flight > len(frames) // 2
    await gone.close()
    for _ in range(40):
        stays.push_audio(bytes(640))
    await _until(lambda: any(e.kind == "Transcript" and e.final for e in seen))
    await _until(lambda: gone.vad.in_flight == 0)
    assert gone._utterance is None
    assert not [r for r in caplog.records if "verdict" in r.getMessage() or r.levelno >= logging.ERROR]
    await stays.close()
    await asyncio.wait_for(reader, 2)


async def test_a_full_stream_drops_new_frames_and_counts_them(caplog):
    """At ``max_pending`` frames without a verdict, a new frame is dropped (not judged, not heard),
    counted on the stream and the batcher, and logged once; the frames taken are answered."""
    batcher = SileroBatcher(ThreadRecordingSession(), tick_s=0.0)
    try:
        vad = BatchedSileroVAD(batcher=batcher, max_pending=3)
        answered: list[bytes] = []
        frames = [bytes([64 + i]) * 640 for i in range(10)]  # loud: each window goes to the model
        caplog.set_level(logging.WARNING, logger="voiceagent.speech")
        for frame in frames:  # no yield: no verdict can come back from the worker meanwhile
            vad.submit(frame, lambda frame, speech: answered.append(frame))
        # the first completes no window (answered in submit), the next three are taken, six dropped
        assert vad.frames_dropped == batcher.frames_dropped == 6 and batcher.frames_inline == 1
        await _until(lambda: len(answered) == 4)
        assert answered == frames[:4] and vad.in_flight == 0
        assert len([r for r in caplog.records if "frames behind" in r.getMessage()]) == 1
        vad.submit(frames[4], lambda frame, speech: answered.append(frame))  # room again
        await _until(lambda: len(answered) == 5)
        with pytest.raises(ValueError, match="640 bytes"):
            vad.submit(b"\0" * 320, lambda frame, speech: None)
    finally:
        batcher.stop()


def test_the_runtime_builds_the_batched_detector(settings):
    from voiceagent import appconfig
    from voiceagent.config import load_config
    from voiceagent.runtime import Runtime

    settings.CONFIG = load_config({"VAD_PROVIDER": "silero"})
    appconfig.reset_for_tests()
    vad = Runtime().vad_factory()
    assert isinstance(vad, BatchedSileroVAD) and vad.session is shared_session()
    assert vad.label.endswith("batched on one thread per process)")
