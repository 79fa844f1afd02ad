"""A TCP fault proxy for tests, in the spirit of toxiproxy: put it between the service and a peer
and break the wire on demand.

It listens on 127.0.0.1 (a free port) and forwards every connection to ``upstream_host:port``,
on its own event loop in a daemon thread, so it works in front of any server (a peer in this
process or another) and the test's loop can never stall it. Faults switch at run time, from any
thread; each call returns once the proxy applies it:

* :meth:`FaultProxy.latency` - every chunk, each way, is held ``ms`` before it is passed on
  (chunks keep their order; the delay is per chunk, not cumulative, as toxiproxy's ``latency``).
* :meth:`FaultProxy.down` - new connections are closed at once with a reset, as by a host whose
  server is gone (the listener stays bound, so the port is never lost to another process and no
  connect races a re-listen). Open connections are left alone (:meth:`cut` them too for a crash).
* :meth:`FaultProxy.cut` - every open connection is reset now (RST both ways), as when a peer
  crashes or a middlebox drops the flow mid-stream. One shot: new connections work.
* :meth:`FaultProxy.blackhole` - a hang: new connections are accepted and never forwarded, and
  open ones stop carrying data (both ways, dropped) without closing.
* :meth:`FaultProxy.reset` - healthy again: no latency, forwarding new connections; connections
  the blackhole accepted (they never reached the peer) are reset, so clients waiting on them fail.

Counters (:attr:`FaultProxy.accepted`, :attr:`FaultProxy.open`) let a test check that the traffic
really went through the proxy.

Usage::

    with FaultProxy(peer.port) as proxy:
        client = connect(proxy.url)          # http://127.0.0.1:<proxy port>
        proxy.latency(500)
        ...
        proxy.reset()
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any, Self

__all__ = ["FaultProxy"]

CHUNK = 65536
_RST = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends a reset, not a FIN


def _abort(writer: asyncio.StreamWriter | None) -> None:
    """Close ``writer``'s socket with a TCP reset."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RST)
    writer.transport.abort()


class _Link:
    """One proxied connection: the client's socket, the upstream socket, a pump each way."""

    def __init__(self, proxy: FaultProxy, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter):
        self.proxy = proxy
        self.client_r, self.client_w = client_r, client_w
        self.up_r: asyncio.StreamReader | None = None
        self.up_w: asyncio.StreamWriter | None = None
        self.held = False  # accepted by the blackhole: never connected upstream

    async def run(self) -> None:
        proxy = self.proxy
        try:
            if proxy._down:
                _abort(self.client_w)
                return
            if proxy._blackholed:
                self.held = True
                while await self.client_r.read(CHUNK):  # swallow everything until the client goes
                    pass
                return
            try:
                self.up_r, self.up_w = await asyncio.open_connection(proxy.upstream_host, proxy.upstream_port)
            except OSError:
                _abort(self.client_w)  # the peer is not there: the client sees a reset
                return
            await asyncio.gather(self._pump(self.client_r, self.up_w), self._pump(self.up_r, self.client_w))
        except (ConnectionError, OSError):
            self.reset()
        finally:
            for writer in (self.client_w, self.up_w):
                if writer is not None and not writer.transport.is_closing():
                    writer.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy ``reader`` to ``writer``, each chunk held for the latency in force when it arrived."""
        proxy = self.proxy
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    if writer.can_write_eof():
                        with contextlib.suppress(OSError):
                            writer.write_eof()
                    return
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if proxy._blackholed:
                    continue  # dropped on the floor: the connection stays open, nothing arrives
                writer.write(data)
                await writer.drain()

        sender = loop.create_task(deliver())
        try:
            while True:
                try:
                    data = await reader.read(CHUNK)
                except (ConnectionError, OSError):
                    self.reset()
                    return
                queue.put_nowait((loop.time() + proxy._latency_s, data))
                if not data:
                    break
            await sender
        except (ConnectionError, OSError):
            self.reset()
        finally:
            if not sender.done():
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                    await sender

    def reset(self) -> None:
        _abort(self.client_w)
        _abort(self.up_w)


class FaultProxy:
    """``FaultProxy(upstream_port).start()`` (or ``with``); see the module docstring for the faults."""

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1", host: str = "127.0.0.1"):
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.host = host
        self.port = 0
        self.accepted = 0  # connections accepted so far
        self._latency_s = 0.0
        self._blackholed = False
        self._down = False
        self._links: dict[_Link, asyncio.Task] = {}
        self._server: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # --- addresses ---------------------------------------------------------------------------------
    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """``http://host:port`` of the proxy (append the peer's path)."""
        return f"http://{self.address}"

    @property
    def open(self) -> int:
        """Connections open through the proxy now."""
        return len(self._links)

    # --- faults --------------------------------------------------------------------------------------
    def latency(self, ms: float) -> None:
        """Hold every chunk ``ms`` milliseconds, each way (0: none)."""
        self._latency_s = max(0.0, ms) / 1000.0

    def down(self) -> None:
        """New connections are reset as they arrive; open ones carry on."""
        self._down = True

    def cut(self) -> int:
        """Reset every open connection now; how many there were."""
        return self._call(self._cut_all)

    def blackhole(self) -> None:
        """Accept and never forward; open connections stop carrying data."""
        self._blackholed = True

    def reset(self) -> None:
        """Healthy again: no latency, not down, no blackhole (the connections it held are reset)."""
        self._latency_s = 0.0
        self._blackholed = False
        self._down = False

        def heal() -> None:
            for link in [link for link in self._links if link.held]:
                link.reset()

        self._call(heal)

    # --- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> Self:
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        self._call(self._listen)
        return self

    def stop(self) -> None:
        if self._loop is None:
            return

        async def shutdown() -> None:
            if self._server is not None:
                self._server.close()
            self._cut_all()  # the links end on their own once reset
            if self._links:
                await asyncio.wait(list(self._links.values()), timeout=2)
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        with contextlib.suppress(Exception):
            self._call(shutdown)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(5)
        self._loop.close()
        self._loop = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- on the proxy's loop -------------------------------------------------------------------------
    def _call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (a function or a coroutine function) on the proxy's loop and return its result."""
        assert self._loop is not None, "the proxy is not started"

        async def run() -> Any:
            result = fn()
            return await result if asyncio.iscoroutine(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, self.port, backlog=512)
        self.port = self._server.sockets[0].getsockname()[1]

    def _cut_all(self) -> int:
        links = list(self._links)
        for link in links:
            link.reset()
        return len(links)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        link = _Link(self, reader, writer)
        task = asyncio.current_task()
        assert task is not None
        self._links[link] = task
        try:
            await link.run()
        finally:
            self._links.pop(link, None)
