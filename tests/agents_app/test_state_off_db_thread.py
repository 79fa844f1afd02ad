"""Session state lives in the cache, not the database: saving or loading it must not queue behind
database work. With SQLite every ORM call runs in Django's single sync thread; state saves went
through it too, so a locked database (another writer, up to the 20 s busy timeout) or a long
history batch held back the engine's save after each answer, and with it ``listening``."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async

from agents_app.sessions import DjangoSessionStore
from voiceagent.conversation.session import SessionState

pytestmark = pytest.mark.django_db(transaction=True)


async def test_state_save_and_load_do_not_wait_for_the_database_thread():
    release = threading.Event()
    occupied = threading.Event()

    def database_work() -> None:  # e.g. a history write waiting on a locked SQLite file
        occupied.set()
        release.wait(30)

    blocker = asyncio.ensure_future(sync_to_async(database_work, thread_sensitive=True)())
    try:
        await asyncio.to_thread(occupied.wait, 10)
        store = DjangoSessionStore()
        state = SessionState(session_id="off-db-thread", scenario="default", active_agent="assistant")
        state.memory["step"] = 3
        await asyncio.wait_for(store.save(state), 10)  # done while the database thread is still busy
        loaded = await asyncio.wait_for(store.load("off-db-thread"), 10)
        assert not release.is_set() and loaded is not None and loaded.memory["step"] == 3
    finally:
        release.set()
        await blocker
