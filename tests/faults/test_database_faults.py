"""The database is locked under a conversation: another process holds SQLite's exclusive write lock
(``BEGIN EXCLUSIVE``) while the caller keeps talking. The conversation goes on - every turn is
answered and heard while the lock is held - and once the lock is released every turn is in the
history, in order."""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import postgres
import pytest
from clients import is_type
from deployments import RUN, Deployment, start, unexpected
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
from fault_proxy import FaultProxy
from fault_wires import Faults
from openai_peer import Text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

GREETING = "Hi, thanks for calling. How can I help?"
LOCKED = ("what are your opening hours", "We are open from nine to five on weekdays.")
LATER = ("and on saturday", "On Saturdays we open from ten to two.")
DOWN = ("is my card blocked", "Yes, your card is blocked.")
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


@pytest.mark.usefixtures("clean_log")
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


# --- PostgreSQL unreachable ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def on_postgres(wires: Faults, tmp_path_factory) -> Iterator[tuple[Deployment, FaultProxy]]:
    """``scripts/run`` on PostgreSQL (the suite's server, a fresh database) reached through a fault
    proxy (the database can vanish)."""
    database = postgres.fresh_database("faults")
    proxy: FaultProxy | None = None
    deployment: Deployment | None = None
    try:
        parts = urlsplit(database)
        proxy = FaultProxy(parts.port or 5432, parts.hostname or "127.0.0.1").start()
        env = {
            "LOG_LEVEL": "INFO",
            "STT_POOL_SIZE": "1",
            "TTS_POOL_SIZE": "1",
            "DATABASE_URL": postgres.via(database, proxy.port),
            **wires.env(),
        }
        root = tmp_path_factory.mktemp("faults-pg-run")
        deployment = start(RUN, root, env, api_key=f"faults-{secrets.token_hex(16)}")
        yield deployment, proxy
    finally:
        if deployment is not None:
            deployment.stop()
        if proxy is not None:
            proxy.stop()
        postgres.drop(database)


async def test_an_unreachable_database_loses_no_turn_once_it_is_back(on_postgres, faults):
    service, database_proxy = on_postgres
    start_at = len(service.log_text())
    faults.chat.push(Text(LOCKED[1]), Text(DOWN[1]), Text(LATER[1]))
    caller = await open_caller(service)
    try:
        await wait_turn(caller, 0)  # the greeting
        first = await type_turn(caller, LOCKED[0])
        assert first.answers == [LOCKED[1]] and not first.errors, first

        database_proxy.down()  # gone: open connections reset, new ones refused
        database_proxy.cut()
        during = await type_turn(caller, DOWN[0])
        assert during.answers == [DOWN[1]] and not during.errors, during
        async with httpx.AsyncClient(timeout=30) as http:  # readers say so, not 500
            read = await http.get(f"{service.http}/sessions/{caller.session_id}", headers=service.auth)
        assert read.status_code == 503 and "detail" in read.json(), (read.status_code, read.text)

        database_proxy.reset()
        later = await type_turn(caller, LATER[0])
        assert later.answers == [LATER[1]] and not later.errors, later
        heard = [("assistant", GREETING)]
        for said, answer in (LOCKED, DOWN, LATER):
            heard += [("user", said), ("assistant", answer)]
        turns = await assert_in_history(service, caller.session_id, heard)
        assert [(t["role"], t["content"]) for t in turns] == heard  # each once, nothing else
    finally:
        database_proxy.reset()
        await caller.close()
    incidents = unexpected(service.log_text()[start_at:], {})
    assert not incidents, incidents
