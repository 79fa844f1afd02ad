"""The browser socket's audio sends never wait for the session cache (bench/bench_soak.py).

Each audio message asks :class:`voiceagent.transport.relay.AudioRelayFlag` whether a dashboard follows the
session's audio, at most once a second. The cache's async API runs on Django's single sync thread,
which the database shares (SQLite): an audio send whose check fell due waited behind that thread's
queue (history writes, sessions being created), typically the first audio of an answer. Only the
flag's first answer may wait for the cache; later checks refresh it in the background.
"""

from __future__ import annotations

import asyncio
import threading
import uuid

from asgiref.sync import sync_to_async

from voiceagent.transport.relay import AudioRelayFlag, mark_audio_wanted


async def test_the_audio_flag_answers_while_the_sync_thread_is_busy_and_catches_up_after():
    sid = f"flag-{uuid.uuid4().hex[:8]}"
    flag = AudioRelayFlag(sid)
    assert await flag.wanted() is False  # the first answer is read from the cache
    await mark_audio_wanted(sid)  # a dashboard now follows the session's audio
    release = threading.Event()
    busy = asyncio.ensure_future(sync_to_async(release.wait, thread_sensitive=True)())  # a long write
    try:
        await asyncio.sleep(1.05)  # the value in hand is a second old: the next send checks again
        async with asyncio.timeout(10):  # hang guard: a check that waited for the thread stays here
            assert await flag.wanted() is False  # the value in hand; the refresh waits its turn
    finally:
        release.set()
        await busy
    async with asyncio.timeout(10):
        while not await flag.wanted():  # the refresh has read the mark
            await asyncio.sleep(0.01)
