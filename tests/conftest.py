"""Shared fixtures. Redis-backed tests use the real server on 127.0.0.1:6379 (scripts/test starts it)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

import pytest

SUPPORT = Path(__file__).parent / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))
ACCEPTANCE_UNIT = "tests/acceptance"


def pytest_collection_modifyitems(config, items):
    """Files that start servers or browsers first, the quick ones after: pytest-xdist hands its
    work units to its workers in this order (``scripts/test`` passes ``--no-loadscope-reorder``:
    xdist's default order, by test count, handed the slow files with few tests out last, and one
    worker stayed busy for minutes while the others had nothing left)."""
    rank = {}
    for item in items:
        path = str(item.fspath)
        if item.get_closest_marker("browser") or item.get_closest_marker("slow"):
            rank[path] = min(rank.get(path, 2), 0 if item.get_closest_marker("browser") else 1)
        else:
            rank.setdefault(path, 2)
    items.sort(key=lambda item: rank[str(item.fspath)])  # stable: a file's tests stay together


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with one exception: the acceptance suite is one work unit, since its
    modules share deployments, and the peers they point at, on one worker
    (tests/acceptance/conftest.py). (xdist's ``loadgroup`` cannot say this under pytest 9, which no
    longer reads the node ids xdist 3.8 rewrites for it.)"""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SuiteScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return ACCEPTANCE_UNIT if scope.startswith(ACCEPTANCE_UNIT + "/") else scope

    return SuiteScheduling(config, log)


@pytest.fixture
def api_client():
    from rest_framework.test import APIClient

    return APIClient(raise_request_exception=False)


@pytest.fixture(autouse=True)
def _fresh_process_state():
    """Module-level singletons (appconfig provider, key cache) start clean in every test."""
    from voiceagent import appconfig, auth

    appconfig.reset_for_tests()
    auth.reset_key_cache()
    yield
    appconfig.reset_for_tests()
    auth.reset_key_cache()


@pytest.fixture
def fake_runtime(db, settings):
    """The process runtime on instant scripted providers; definitions loaded; cache clean."""
    from django.core.cache import cache

    from agents_app.catalog import catalog, sync_files
    from voiceagent.connections import tracker
    from voiceagent.conversation.testing import EnergyVAD, InstantTTS, ScriptedChat, ScriptedSTT
    from voiceagent.runtime import runtime

    tracker.reset()
    cache.clear()
    sync_files()
    catalog.reload()
    saved = (runtime.stt, runtime.tts, runtime.chat, runtime.vad_factory)
    runtime.stt = ScriptedSTT(["i lost my card"] * 50)
    runtime.tts = InstantTTS(sample_rate=24000, ms_per_word=20, chunk_ms=20)
    runtime.chat = ScriptedChat(default="Sure, I can help with that.")
    runtime.vad_factory = EnergyVAD
    yield runtime
    runtime.stt, runtime.tts, runtime.chat, runtime.vad_factory = saved
    cache.clear()


@pytest.fixture
async def hung_redis():
    """A TCP peer that takes Redis connections and commands and never answers one."""
    peers: list[asyncio.StreamWriter] = []

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer)
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    for writer in peers:
        writer.close()
    server.close()
    await server.wait_closed()


@pytest.fixture
def hung_channel_layer(hung_redis, settings):
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "voiceagent.transport.channel_layer.RedisChannelLayer",
            "CONFIG": {"hosts": [f"redis://127.0.0.1:{hung_redis}/0"]},
        }
    }
