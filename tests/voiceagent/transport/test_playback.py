"""PacedPlayback: exact wire frames, a bounded queue, barge-in, the peer's back-off, draining."""

from __future__ import annotations

import asyncio
import time

from voiceagent.transport.playback import PacedPlayback


def playback(sent: list[bytes], **overrides) -> PacedPlayback:
    async def send(frame: bytes) -> None:
        sent.append(frame)

    options = {"frame_bytes": 4, "frame_ms": 5, "lead_frames": 2, "max_frames": 100, "pad_byte": 0}
    return PacedPlayback(send, **{**options, **overrides})


async def test_audio_is_recut_into_frames_and_the_last_one_padded():
    sent: list[bytes] = []
    p = playback(sent)
    task = asyncio.create_task(p.run())
    p.push(b"abcdef")
    p.push(b"gh" + b"ij")
    p.flush()
    await p.drained(2)
    p.stop()
    await task
    assert sent == [b"abcd", b"efgh", b"ij\x00\x00"]


async def test_unpadded_last_frame_goes_out_short():
    sent: list[bytes] = []
    p = playback(sent, pad_byte=None)
    task = asyncio.create_task(p.run())
    p.push(b"abcdef")
    p.flush()
    await p.drained(2)
    p.stop()
    await task
    assert sent == [b"abcd", b"ef"]


async def test_a_full_queue_drops_the_oldest_and_counts_it():
    sent: list[bytes] = []
    p = playback(sent, max_frames=3)
    p.push(b"0000111122223333")  # four frames, room for three; nothing sends yet (no task)
    assert len(p) == 3 and p.dropped == 1
    task = asyncio.create_task(p.run())
    await p.drained(2)
    p.stop()
    await task
    assert sent == [b"1111", b"2222", b"3333"]


async def test_barge_in_under_the_lock_lets_nothing_queued_follow():
    sent: list[bytes] = []
    p = playback(sent, frame_ms=20, lead_frames=0)
    task = asyncio.create_task(p.run())
    p.push(b"x" * 4 * 50)  # one second of frames
    await asyncio.sleep(0.05)
    async with p.lock:
        p.clear()
        sent.append(b"STOP")
    await asyncio.sleep(0.1)
    p.stop()
    await task
    assert sent[-1] == b"STOP" and 0 < len(sent) - 1 < 50


async def test_the_peer_asking_to_slow_down_pauses_sending():
    sent: list[bytes] = []
    p = playback(sent)
    p.paused_until = time.monotonic() + 3600
    task = asyncio.create_task(p.run())
    p.push(b"abcd")
    await asyncio.sleep(0.05)
    assert sent == []  # paused
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_new_frame_size_drops_what_was_buffered():
    sent: list[bytes] = []
    p = playback(sent)
    p.push(b"abcdef")
    p.set_frame_bytes(2)
    assert len(p) == 0
    p.push(b"wxyz")
    task = asyncio.create_task(p.run())
    await p.drained(2)
    p.stop()
    await task
    assert sent == [b"wx", b"yz"]


async def test_a_source_faster_than_real_time_is_still_paced():
    """The realtime API streams small deltas faster than real time: the queue runs dry between them
    while the schedule is ahead, and that must not restart the schedule (it sent every frame at once)."""
    loop = asyncio.get_running_loop()
    sent: list[float] = []

    async def send(frame: bytes) -> None:
        sent.append(loop.time())

    p = PacedPlayback(send, frame_bytes=100, frame_ms=100, lead_frames=1, max_frames=100, pad_byte=None)
    task = asyncio.create_task(p.run())
    for _ in range(10):  # 6 frames' worth arriving within ~0.1 s, in 60-byte pieces
        p.push(b"x" * 60)
        await asyncio.sleep(0.01)
    await p.drained(3)
    p.stop()
    await task
    since_first = [t - sent[0] for t in sent]
    assert len(sent) == 6
    assert since_first[1] < 0.05  # the first frame and its lead go out as soon as they are there
    # then frame k no earlier than (k - 1) x 100 ms after the first (the schedule), not as they
    # arrived (all within ~0.1 s); the second frame's own arrival (~20 ms late) does not move it
    assert all(t >= (k - 1) * 0.1 - 0.005 for k, t in enumerate(since_first) if k >= 2), since_first


async def test_a_duck_lowers_what_is_sent_from_then_and_a_barge_in_ends_it():
    """PCM16 frames: a Duck's gain applies to the frames not sent yet; Duck(0) and drop() restore."""
    import numpy as np

    sent: list[bytes] = []
    p = playback(sent, frame_bytes=4)
    loud = np.array([10000, -10000], "<i2").tobytes()
    p.set_gain(-20.0)
    p.push(loud)
    p.set_gain(0.0)
    task = asyncio.create_task(p.run())
    await p.drained(2)
    p.push(loud)
    await p.drained(2)
    p.set_gain(-20.0)
    p.drop()  # a barge-in: what plays next is at full gain
    p.push(loud)
    await p.drained(2)
    p.stop()
    await task
    levels = [np.abs(np.frombuffer(f, "<i2")).max() for f in sent]
    assert levels == [10000, 10000, 10000]  # the gain counts when a frame is sent, not queued

    sent.clear()
    p = playback(sent, frame_bytes=4)
    task = asyncio.create_task(p.run())
    p.set_gain(-20.0)
    p.push(loud)
    await p.drained(2)
    p.stop()
    await task
    assert [np.abs(np.frombuffer(f, "<i2")).max() for f in sent] == [1000]  # -20 dB


async def test_a_duck_on_a_mulaw_wire_is_applied_to_the_companded_frames():
    import numpy as np

    from voiceagent.speech.audio.mulaw import ulaw_decode, ulaw_encode

    sent: list[bytes] = []
    p = playback(sent, frame_bytes=4, mulaw=True)
    frame = ulaw_encode(np.array([16000, -16000, 8000, -8000], "<i2"))
    task = asyncio.create_task(p.run())
    p.set_gain(-20.0)
    p.push(frame)
    await p.drained(2)
    p.stop()
    await task
    ducked = np.abs(ulaw_decode(sent[0]).astype(float))
    assert np.allclose(ducked, [1600, 1600, 800, 800], rtol=0.1), ducked
