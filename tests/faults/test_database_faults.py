"""The database is locked under a conversation: another process holds SQLite's exclusive write lock
(``BEGIN EXCLUSIVE``) while the caller keeps talking. The conversation goes on - every turn is
answered and heard while the lock is held - and once the lock is released every turn is in the
history, in order."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from clients import is_type
from deployments import Deployment
from fault_clients import (
    assert_in_history,
    heard_out,
    open_caller,
    reply_since,
    send,
    settled,
    type_turn,
    wait_turn,
)
from openai_peer import Text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.usefixtures("clean_log")]

GREETING = "Hi, thanks for calling. How can I help?"
LOCKED = ("what are your opening hours", "We are open from nine to five on weekdays.")
LATER = ("and on saturday", "On Saturdays we open from ten to two.")
HOLD_S = 3.0  # the lock is held at least this long after the answer began


class ExclusiveLock:
    """SQLite's write lock on the service's database, taken from another connection (as a backup
    job or a migration would) and held until :meth:`release` - not for a time: the test decides."""

    def __init__(self, path: Path) -> None:
        self.connection = sqlite3.connect(path, isolation_level=None, timeout=30, check_same_thread=False)
        self.held = False

    async def acquire(self) -> None:
        await asyncio.to_thread(self.connection.execute, "BEGIN EXCLUSIVE")
        self.held = True

    async def release(self) -> None:
        if self.held:
            self.held = False
            await asyncio.to_thread(self.connection.execute, "COMMIT")

    async def close(self) -> None:
        await self.release()
        self.connection.close()


def database(deployment: Deployment) -> Path:
    """The deployment's SQLite file (deployments.start puts it next to the log)."""
    path = deployment.log.parent / "db.sqlite3"
    assert path.exists(), path
    return path


async def test_a_locked_database_holds_back_no_turn_and_loses_none(service, faults):
    caller = await open_caller(service)
    lock = ExclusiveLock(database(service))
    try:
        await wait_turn(caller, 0)  # the greeting
        await assert_in_history(service, caller.session_id, [("assistant", GREETING)])  # the writer is idle
        faults.chat.push(Text(LOCKED[1]), Text(LATER[1]))

        await lock.acquire()
        start = len(caller.inbox.messages)
        await send(caller, "text", {"text": LOCKED[0]})
        final = await caller.inbox.wait(is_type("response", final=True), start)
        await caller.inbox.wait(lambda m: m.get("type") == "audio", start)  # being spoken
        await asyncio.sleep(HOLD_S)
        assert lock.held  # answered and spoken with the database locked
        # Its end (``listening``) may wait for the lock: with SQLite the session state's save
        # shares Django's one sync thread with the history writer, which waits for the lock.
        await lock.release()
        await caller.inbox.wait(settled, final)
        await heard_out(caller)
        locked = reply_since(caller, LOCKED[0], start)
        assert locked.answers == [LOCKED[1]] and not locked.errors, locked

        later = await type_turn(caller, LATER[0])
        assert later.answers == [LATER[1]] and not later.errors, later
        heard = [("assistant", GREETING)]
        for said, answer in (LOCKED, LATER):
            heard += [("user", said), ("assistant", answer)]
        turns = await assert_in_history(service, caller.session_id, heard)
        assert [(t["role"], t["content"]) for t in turns] == heard  # each once, nothing else
    finally:
        await lock.close()
        await caller.close()
