"""The fault proxy itself (tests/support/fault_proxy.py) against a local echo server: it forwards,
and each fault does to a client what it says."""

from __future__ import annotations

import asyncio
import time

import pytest
from fault_proxy import FaultProxy

TIMEOUT = 10.0


class Echo:
    """An asyncio echo server on the test's loop, counting connections."""

    def __init__(self) -> None:
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> Echo:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()


@pytest.fixture
async def echo():
    server = await Echo().start()
    yield server
    await server.close()


@pytest.fixture
def proxy(echo):
    with FaultProxy(echo.port) as started:
        yield started


async def connect(proxy: FaultProxy):
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", proxy.port), TIMEOUT)


async def ended(reader: asyncio.StreamReader) -> bool:
    """Whether the connection ends (EOF or a reset) rather than hangs."""
    try:
        return await asyncio.wait_for(reader.read(1), TIMEOUT) == b""
    except ConnectionResetError:
        return True


async def turned_away(proxy: FaultProxy) -> bool:
    """Whether a new connection is reset (at connect or at its first read) rather than served."""
    try:
        reader, writer = await connect(proxy)
    except ConnectionError:
        return True
    try:
        writer.write(b"anyone?")
        await writer.drain()
    except ConnectionError:
        return True
    return await ended(reader)


async def roundtrip(reader, writer, data: bytes) -> bytes:
    writer.write(data)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(data)), TIMEOUT)


async def test_forwards_both_ways_and_counts(proxy, echo):
    reader, writer = await connect(proxy)
    assert await roundtrip(reader, writer, b"hello") == b"hello"
    big = bytes(range(256)) * 2048  # 512 KiB: many chunks, in order
    assert await roundtrip(reader, writer, big) == big
    assert proxy.accepted == 1 and proxy.open == 1 and echo.connections == 1
    writer.close()
    await writer.wait_closed()


async def test_latency_holds_each_chunk_each_way(proxy):
    reader, writer = await connect(proxy)
    proxy.latency(300)
    began = time.monotonic()
    assert await roundtrip(reader, writer, b"slow") == b"slow"
    assert time.monotonic() - began >= 0.6  # 300 ms there and 300 ms back: a lower bound, never flaky
    proxy.reset()
    assert await roundtrip(reader, writer, b"fast") == b"fast"
    writer.close()


async def test_down_closes_new_connections_until_reset(proxy, echo):
    reader, writer = await connect(proxy)
    assert await roundtrip(reader, writer, b"open") == b"open"
    proxy.down()
    assert await turned_away(proxy)
    assert await roundtrip(reader, writer, b"still") == b"still"  # open connections carry on
    assert echo.connections == 1
    proxy.reset()
    reader2, writer2 = await connect(proxy)
    assert await roundtrip(reader2, writer2, b"back") == b"back"
    writer.close()
    writer2.close()


async def test_cut_resets_every_open_connection_once(proxy):
    pairs = [await connect(proxy) for _ in range(3)]
    for reader, writer in pairs:
        assert await roundtrip(reader, writer, b"x") == b"x"
    assert proxy.cut() == 3
    for reader, _ in pairs:
        with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
            await asyncio.wait_for(reader.readexactly(1), TIMEOUT)
    reader, writer = await connect(proxy)  # one shot: the next connection works
    assert await roundtrip(reader, writer, b"again") == b"again"
    writer.close()


async def test_blackhole_accepts_and_never_answers_until_reset(proxy, echo):
    reader, writer = await connect(proxy)
    assert await roundtrip(reader, writer, b"before") == b"before"
    proxy.blackhole()
    writer.write(b"lost")
    await writer.drain()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.read(1), 0.5)  # open, silent: a hang
    held_r, held_w = await connect(proxy)  # a new connection is accepted...
    held_w.write(b"anyone?")
    await held_w.drain()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(held_r.read(1), 0.5)
    assert echo.connections == 1  # ...and never reaches the peer
    proxy.reset()
    assert await ended(held_r)  # the held one is reset, not left hanging
    reader2, writer2 = await connect(proxy)
    assert await roundtrip(reader2, writer2, b"healthy") == b"healthy"
    writer.close()
    writer2.close()


async def test_an_absent_peer_is_a_reset_for_the_client():
    with FaultProxy(upstream_port=1) as proxy:  # nothing listens on port 1
        assert await turned_away(proxy)
