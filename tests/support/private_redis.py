"""A private redis-server for tests that need their own Redis: a password, a port nobody else uses."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator

import redis
from servers import free_port


@contextlib.contextmanager
def redis_with_password(password: str) -> Iterator[int]:
    """A private redis-server that demands ``password``; its port."""
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--requirepass", password]
        + ["--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=port, password=password).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


class RestartableRedis:
    """A private redis-server on a fixed port that a test can stop and start again: a Redis outage.

    No persistence (``--save ""``): a restart comes back empty, as a cache that lost its memory
    does, which is the harder case for the service (only what it writes again is there).
    """

    def __init__(self, password: str | None = None) -> None:
        self.port = free_port()
        self.password = password
        self.proc: subprocess.Popen | None = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, password=self.password, socket_timeout=2)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 10.0) -> None:
        """Start on this server's port and wait until it answers PING."""
        if self.running:
            return
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        cmd += ["--save", "", "--appendonly", "no"]
        if self.password:
            cmd += ["--requirepass", self.password]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.client().ping()
                return
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL); connections to the port are refused from then on."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def __enter__(self) -> RestartableRedis:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
