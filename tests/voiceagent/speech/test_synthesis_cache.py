"""SynthesisCache: one synthesis per line however many callers ask at once; kept lines replayed."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from voiceagent.speech.synthesis_cache import SynthesisCache


class Producer:
    """A stand-in synthesis: yields ``chunks``; waits on ``gate`` after the first; counts its runs."""

    def __init__(self, chunks=(b"aa", b"bb", b"cc"), fail: Exception | None = None):
        self.chunks, self.fail = chunks, fail
        self.runs = 0
        self.closed = 0  # runs that ended (finished, failed or cancelled)
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self):
        self.runs += 1
        try:
            for index, chunk in enumerate(self.chunks):
                if index:
                    await self.gate.wait()
                yield chunk
            if self.fail is not None:
                raise self.fail
        finally:
            self.closed += 1


async def read(cache: SynthesisCache, producer: Producer, text: str = "hello") -> list[bytes]:
    return [chunk async for chunk in cache.stream(("voice", text), text, producer)]


async def test_callers_at_once_share_one_synthesis_and_stream_it_as_it_comes():
    cache, producer = SynthesisCache(), Producer()
    producer.gate.clear()
    first = cache.stream(("voice", "hello"), "hello", producer)
    assert await anext(first) == b"aa"  # the first chunk comes before the synthesis has ended
    others = [asyncio.create_task(read(cache, producer)) for _ in range(20)]
    await asyncio.sleep(0.01)
    producer.gate.set()
    rest = [chunk async for chunk in first]
    assert rest == [b"bb", b"cc"]
    assert await asyncio.gather(*others) == [[b"aa", b"bb", b"cc"]] * 20
    assert producer.runs == 1
    assert cache.metrics()["shared"] == 20


async def test_a_kept_line_is_replayed_and_another_line_is_synthesised():
    cache, producer = SynthesisCache(), Producer()
    assert await read(cache, producer) == [b"aa", b"bb", b"cc"]
    assert await read(cache, producer) == [b"aa", b"bb", b"cc"]
    assert producer.runs == 1 and cache.metrics()["hits"] == 1
    await read(cache, producer, "goodbye")
    assert producer.runs == 2


async def test_a_failed_synthesis_reaches_every_caller_and_is_not_kept():
    cache, producer = SynthesisCache(), Producer(fail=RuntimeError("tts down"))
    results = await asyncio.gather(read(cache, producer), read(cache, producer), return_exceptions=True)
    assert [str(r) for r in results] == ["tts down", "tts down"]
    assert producer.runs == 1
    with pytest.raises(RuntimeError, match="tts down"):
        await read(cache, producer)
    assert producer.runs == 2 and cache.metrics()["lines"] == 0


async def test_the_last_caller_stopping_early_stops_the_synthesis():
    cache, producer = SynthesisCache(), Producer()
    producer.gate.clear()
    one = cache.stream(("voice", "hello"), "hello", producer)
    two = cache.stream(("voice", "hello"), "hello", producer)
    assert await anext(one) == b"aa" and await anext(two) == b"aa"
    await one.aclose()  # barge-in on one call: the other still listens
    assert producer.closed == 0
    await two.aclose()  # nobody listens: the synthesis is cancelled, and has ended when aclose returns
    assert producer.closed == 1
    assert cache.metrics()["lines"] == 0
    producer.gate.set()
    assert await read(cache, producer) == [b"aa", b"bb", b"cc"]  # asked again: synthesised again
    assert producer.runs == 2


async def test_kept_audio_is_bounded_least_recently_used_first_and_long_lines_pass_through():
    cache = SynthesisCache(max_bytes=12, max_chars=10)
    producer = Producer(chunks=(b"1234", b"5678"))  # 8 bytes a line
    await read(cache, producer, "one")
    await read(cache, producer, "two")  # 16 bytes: "one" goes
    assert (cache.metrics()["lines"], cache.metrics()["bytes"]) == (1, 8)
    await read(cache, producer, "one")
    assert producer.runs == 3
    long_line = "a line longer than ten characters"
    await read(cache, producer, long_line)
    await read(cache, producer, long_line)
    assert producer.runs == 5


async def test_a_reader_cancelled_while_waiting_leaves_no_synthesis_running():
    cache, producer = SynthesisCache(), Producer()
    producer.gate.clear()
    reader = asyncio.create_task(read(cache, producer))
    await asyncio.sleep(0.01)
    reader.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reader
    assert producer.closed == 1


async def test_a_request_while_the_last_listener_stops_the_line_gets_a_new_synthesis():
    """The last reader of a line stops (a barge-in) and waits for its synthesis to wind down; a
    request for the same words meanwhile (another caller's answer) joined the dying line, got its
    cancellation and its caller heard the words of the answer but no audio (acceptance suite, phone
    calls interrupting each other's identical answers)."""
    cache = SynthesisCache()
    winding = asyncio.Event()

    async def slow_to_stop():
        try:
            yield b"aa"
            await asyncio.sleep(10)
            yield b"bb"
        except asyncio.CancelledError:
            winding.set()
            await asyncio.sleep(0.05)  # e.g. freeing a synthesis thread and its pool slot
            raise

    first = cache.stream(("voice", "hello"), "hello", slow_to_stop)
    assert await anext(first) == b"aa"
    stopping = asyncio.ensure_future(first.aclose())  # the only listener stops
    await winding.wait()
    second = await read(cache, Producer(chunks=(b"xx", b"yy")))
    await stopping
    assert second == [b"xx", b"yy"]


async def test_a_line_stopped_early_is_never_kept_even_when_its_producer_ends_quietly():
    """A producer that ends without an error when cancelled (it stops between sentences) left a
    cut line - or an empty one - kept and replayed as the whole answer: callers got words, no audio."""
    cache = SynthesisCache()

    async def quiet_on_cancel():
        try:
            yield b"aa"
            await asyncio.sleep(10)
            yield b"bb"
        except asyncio.CancelledError:
            return  # swallowed: the generator just ends

    first = cache.stream(("voice", "hello"), "hello", quiet_on_cancel)
    assert await anext(first) == b"aa"
    await first.aclose()  # barge-in: the only listener stops
    await asyncio.sleep(0.01)
    assert await read(cache, Producer(chunks=(b"xx", b"yy"))) == [b"xx", b"yy"]
