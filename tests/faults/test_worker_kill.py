"""A worker process dies (SIGKILL) while it holds a browser conversation: uvicorn with two workers on
Redis, as the README scales out. The caller sees the socket close abnormally (1006; 1012 if the
server could say it restarts), the history up to the last answered turn is intact on the other
worker, and a new connection resumes the same session and is answered."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from clients import is_type
from deployments import Deployment, clean_environ, unexpected, wait_ready
from fault_clients import (
    TURN_TIMEOUT_S,
    assert_in_history,
    history,
    open_caller,
    reply_since,
    send,
    settled,
    type_turn,
    wait_turn,
)
from fault_wires import Faults
from openai_peer import Text
from servers import ROOT, free_port, migrate, server_command

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.timeout(240)]

REDIS_DB = 12  # 0 test_redis, 2 test_multiprocess_relay, 5 test_telephony_servers, 11 acceptance
KIND = "uvicorn-2-workers-redis-faults"
GREETING = "Hi, thanks for calling. How can I help?"
BEFORE = (
    ("what are your opening hours", "We are open from nine to five on weekdays."),
    ("and on saturday", "On Saturdays we open from ten to two."),
)
AFTER = ("are you still there", "Yes, I am here. How can I help?")


def flush() -> None:
    redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB).flushdb()


@pytest.fixture(scope="module")
def two_workers(wires: Faults, tmp_path_factory) -> Iterator[Deployment]:
    """``uvicorn voiceagent.asgi:application --workers 2`` on Redis, one SQLite file, the chat peer."""
    root = tmp_path_factory.mktemp("faults-workers")
    api_key = f"faults-{secrets.token_hex(16)}"
    env = {
        **clean_environ(),
        "DATABASE_URL": f"sqlite:///{root / 'db.sqlite3'}",
        "API_KEYS": api_key,
        "PYTHONUNBUFFERED": "1",
        "LOG_LEVEL": "INFO",
        "STT_POOL_SIZE": "1",
        "TTS_POOL_SIZE": "1",
        "CACHE_HOST": "127.0.0.1",
        "CACHE_PORT": "6379",
        "CACHE_DB": str(REDIS_DB),
        **wires.env(),
    }
    flush()
    migrate(env)
    port = free_port()
    log = root / "uvicorn.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            server_command("uvicorn", port, workers=2),
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deployment = Deployment(KIND, port, log, proc, api_key, workers=2)
    try:
        wait_ready(deployment)
        yield deployment
    finally:
        deployment.stop()
        flush()


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def worker_holding(deployment: Deployment, client_port: int) -> int:
    """The worker process whose socket is the server end of the client's connection from ``client_port``."""
    wanted = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].split(":")[1], 16)
        remote_port = int(fields[2].split(":")[1], 16)
        if local_port == deployment.port and remote_port == client_port:
            wanted = fields[9]
    assert wanted, f"no server socket for the client port {client_port}"
    for pid in children(deployment.proc.pid):
        if wanted in socket_inodes(pid):
            return pid
    raise AssertionError(f"no worker of {deployment.proc.pid} holds socket inode {wanted}")


async def test_a_worker_killed_mid_conversation_loses_no_answered_turn_and_the_caller_resumes(
    two_workers, faults
):
    service = two_workers
    faults.chat.push(*(Text(answer) for _, answer in BEFORE), Text(AFTER[1]))
    caller = await open_caller(service)
    try:
        await wait_turn(caller, 0)  # the greeting
        for said, answer in BEFORE:
            reply = await type_turn(caller, said)
            assert reply.answers == [answer] and not reply.errors, reply
        heard = [("assistant", GREETING)]
        for said, answer in BEFORE:
            heard += [("user", said), ("assistant", answer)]
        await assert_in_history(service, caller.session_id, heard)  # written before the kill

        worker = worker_holding(service, caller.ws.local_address[1])
        os.kill(worker, signal.SIGKILL)
        async with asyncio.timeout(TURN_TIMEOUT_S):
            while caller.inbox.closed is None:
                await asyncio.sleep(0.05)
        assert caller.inbox.closed["code"] in (1006, 1012), caller.inbox.closed
    finally:
        await caller.close()

    turns = await history(service, caller.session_id)  # on the worker left (or a restarted one)
    assert [(t["role"], t["content"]) for t in turns] == heard

    again = await open_caller(service, session_id=caller.session_id)
    try:
        reply = await type_turn(again, AFTER[0])  # resumed: no greeting, the history goes on
        assert reply.answers == [AFTER[1]] and not reply.errors, reply
        await assert_in_history(
            service, caller.session_id, [*heard, ("user", AFTER[0]), ("assistant", AFTER[1])]
        )
    finally:
        await again.close()
    assert service.proc.poll() is None  # the server lives on
    incidents = unexpected(service.log_text(), {})
    assert not incidents, incidents  # no ERROR line, no traceback: a killed worker is no incident


LONG = (
    "Let me walk you through the whole procedure step by step, so please bear with me. First you "
    "open the app, then you choose settings, then security, then you scroll all the way down to the "
    "card section, and there you can freeze the card, order a new one and set a new pin."
)


async def test_a_worker_killed_while_a_received_reply_plays_keeps_that_reply(two_workers, faults):
    """The caller has a reply in full (text and audio) while it still plays when its worker dies:
    the reply is in the history (written when sent, heard "unknown"), and the session resumed on
    the other worker has it in the model's context."""
    service = two_workers
    faults.chat.push(Text(LONG), Text(AFTER[1]))
    caller = await open_caller(service)
    try:
        await wait_turn(caller, 0)  # the greeting, heard out
        start = len(caller.inbox.messages)
        await send(caller, "text", {"text": "how do I freeze my card"})
        i = await caller.inbox.wait(is_type("response", final=True), start, timeout=TURN_TIMEOUT_S)
        await caller.inbox.wait(settled, i, timeout=TURN_TIMEOUT_S)  # text and audio all received
        assert reply_since(caller, "", start).answers == [LONG]
        # While it plays, wait for the row (the background writer), but never past its last second.
        turns: list[dict] = []
        while caller.playing_until - time.monotonic() > 1.5:
            turns = await history(service, caller.session_id)
            if any(t["content"] == LONG for t in turns):
                break
            await asyncio.sleep(0.2)
        assert caller.playing_until - time.monotonic() > 0.5, "the reply played out before the kill"
        os.kill(worker_holding(service, caller.ws.local_address[1]), signal.SIGKILL)
        async with asyncio.timeout(TURN_TIMEOUT_S):
            while caller.inbox.closed is None:
                await asyncio.sleep(0.05)
    finally:
        await caller.close()

    turns = await history(service, caller.session_id)
    replies = [t for t in turns if t["role"] == "assistant" and t["content"] == LONG]
    assert [t.get("heard") for t in replies] == ["unknown"], turns  # once, how much heard unknown

    again = await open_caller(service, session_id=caller.session_id)
    try:
        reply = await type_turn(again, AFTER[0])
        assert reply.answers == [AFTER[1]] and not reply.errors, reply
        context = [(m["role"], m.get("content")) for m in faults.chat.last_body["messages"]]
        assert ("assistant", LONG) in context, context
        await assert_in_history(service, caller.session_id, [("assistant", LONG), ("user", AFTER[0])])
    finally:
        await again.close()
    assert service.proc.poll() is None
    incidents = unexpected(service.log_text(), {})
    assert not incidents, incidents
