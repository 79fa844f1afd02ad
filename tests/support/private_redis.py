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
