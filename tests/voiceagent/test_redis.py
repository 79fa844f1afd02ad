"""With CACHE_HOST set: Django's cache on Redis and the channels-redis layer, across processes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
from servers import ROOT

pytestmark = pytest.mark.redis

SETUP = """
import django, os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "voiceagent.settings")
django.setup()
"""


def run(code: str, env_extra: dict | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    env = {
        "PATH": "/usr/bin:/bin",
        "CACHE_HOST": "127.0.0.1",
        "CACHE_PORT": "6379",
        "CACHE_DB": "0",
        "PYTHONPATH": str(ROOT),
        **(env_extra or {}),
    }
    return subprocess.run(
        [sys.executable, "-c", SETUP + textwrap.dedent(code)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def popen(code: str) -> subprocess.Popen:
    env = {"PATH": "/usr/bin:/bin", "CACHE_HOST": "127.0.0.1", "CACHE_PORT": "6379", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", SETUP + textwrap.dedent(code)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_settings_select_redis_backends():
    proc = run("""
        from django.conf import settings
        from channels.layers import get_channel_layer
        print(settings.CACHES['default']['BACKEND'], type(get_channel_layer()).__name__)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["django.core.cache.backends.redis.RedisCache", "RedisChannelLayer"]


def test_default_is_in_process_memory():
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            SETUP
            + textwrap.dedent("""
        from django.conf import settings
        from channels.layers import get_channel_layer
        print(settings.CACHES['default']['BACKEND'], type(get_channel_layer()).__name__)
    """),
        ],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert proc.stdout.split() == ["django.core.cache.backends.locmem.LocMemCache", "InMemoryChannelLayer"]


def test_cache_is_shared_between_processes():
    key = f"test:{uuid.uuid4().hex}"
    writer = run(f"from django.core.cache import cache; cache.set({key!r}, {{'turns': 3}}, 30)")
    assert writer.returncode == 0, writer.stderr
    reader = run(f"from django.core.cache import cache; import json; print(json.dumps(cache.get({key!r})))")
    assert reader.returncode == 0, reader.stderr
    assert json.loads(reader.stdout) == {"turns": 3}


def test_a_call_placed_on_one_worker_is_found_by_the_media_stream_on_another():
    """The REST worker writes the call map; the worker the provider's media stream lands on reads it."""
    cid = f"call-{uuid.uuid4().hex}"
    writer = run(f"""
        import asyncio
        from calls.callmap import CallInfo, remember
        info = CallInfo({cid!r}, "sess-1", "banking", "VOICE_LIVE", "outbound", "+15551230000")
        asyncio.run(remember(info))
    """)
    assert writer.returncode == 0, writer.stderr
    reader = run(f"""
        import asyncio, dataclasses, json
        from calls.callmap import lookup, forget
        info = asyncio.run(lookup({cid!r}))
        print(json.dumps(dataclasses.asdict(info)))
        asyncio.run(forget({cid!r}))
    """)
    assert reader.returncode == 0, reader.stderr
    assert json.loads(reader.stdout) == {
        "connection_id": cid,
        "session_id": "sess-1",
        "scenario": "banking",
        "mode": "VOICE_LIVE",
        "direction": "outbound",
        "phone_number": "+15551230000",
    }


def test_two_processes_exchange_a_group_message_through_channels_redis():
    group = f"session.{uuid.uuid4().hex}"
    receiver = popen(f"""
        import asyncio, json
        from channels.layers import get_channel_layer
        async def main():
            layer = get_channel_layer()
            channel = await layer.new_channel()
            await layer.group_add({group!r}, channel)
            print("READY", flush=True)
            message = await asyncio.wait_for(layer.receive(channel), 20)
            print(json.dumps(message), flush=True)
        asyncio.run(main())
    """)
    try:
        assert receiver.stdout.readline().strip() == "READY"
        sender = run(f"""
            import asyncio
            from channels.layers import get_channel_layer
            message = {{"type": "relay.message", "text": "hello"}}
            asyncio.run(get_channel_layer().group_send({group!r}, message))
        """)
        assert sender.returncode == 0, sender.stderr
        line = receiver.stdout.readline()
        assert json.loads(line) == {"type": "relay.message", "text": "hello"}
    finally:
        receiver.kill()
        receiver.wait()


def test_readiness_cache_check_on_redis():
    proc = run("""
        from voiceagent.components import _cache_roundtrip
        print(_cache_roundtrip())
    """)
    assert "healthy" in proc.stdout and "Redis at 127.0.0.1:6379" in proc.stdout, proc.stderr


def test_unreachable_redis_is_unhealthy_not_a_crash():
    began = time.monotonic()
    proc = run(
        """
        import asyncio
        from voiceagent.health.checks import register_check, run_checks
        from voiceagent.components import _cache_roundtrip
        register_check("cache", _cache_roundtrip)
        body = asyncio.run(run_checks(timeout=1.5))
        print(next(c for c in body["checks"] if c["component"] == "cache")["status"])
    """,
        {"CACHE_HOST": "127.0.0.1", "CACHE_PORT": "1"},
    )
    assert proc.stdout.strip() == "unhealthy", proc.stderr
    assert time.monotonic() - began < 20


def test_a_redis_that_accepts_but_never_answers_fails_calls_instead_of_hanging():
    """A partitioned or paused Redis accepts connections and never answers. Cache calls run in
    Django's single sync thread: without socket timeouts one call hung it, and every session with
    it, until the host came back. Now the call fails (the outage handling takes over)."""
    from fault_proxy import FaultProxy

    with FaultProxy(6379) as proxy:
        proxy.blackhole()
        proc = run(
            """
            import asyncio
            from django.core.cache import cache
            from channels.layers import get_channel_layer
            try:
                cache.get("voiceagent-test-key")
                print("cache answered")
            except Exception as exc:
                print("cache failed:", type(exc).__name__)
            async def send():
                try:
                    await get_channel_layer().send("test.channel", {"type": "x"})
                    print("layer answered")
                except Exception as exc:
                    print("layer failed:", type(exc).__name__)
            asyncio.run(send())
            """,
            {"CACHE_PORT": str(proxy.port), "CACHE_SOCKET_TIMEOUT_S": "0.5"},
            timeout=60,
        )
    assert "cache failed: TimeoutError" in proc.stdout, (proc.stdout, proc.stderr)
    assert "layer failed: TimeoutError" in proc.stdout, (proc.stdout, proc.stderr)
