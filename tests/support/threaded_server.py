"""An ASGI app served by uvicorn on 127.0.0.1 (a free port) in a background thread.

The local protocol peers (OpenAI-compatible chat, ACS Call Automation) subclass it and provide
``_app()``: the code under test then talks to them over real sockets with the real SDKs, while the
peer runs on its own event loop and cannot be blocked by the test's.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from typing import Any, Self

import uvicorn


class ThreadedAsgiServer:
    label = "peer"  # names the thread and the start-up error

    def __init__(self) -> None:
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    def _app(self) -> Any:
        raise NotImplementedError

    def start(self) -> Self:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(
            self._app(), log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=1
        )
        self._server = server = uvicorn.Server(config)
        sock = self._sock
        self._thread = threading.Thread(
            target=lambda: asyncio.run(server.serve(sockets=[sock])),
            name=f"{self.label}-{self.port}",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the {self.label} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=3)
            if self._thread.is_alive() and self._server is not None:
                self._server.force_exit = True
                self._thread.join(timeout=3)
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._server = self._thread = self._sock = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
