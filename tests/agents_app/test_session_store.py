"""Session state through a real Redis; history written turn by turn survives a process restart."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid

import pytest
from servers import ROOT, base_env, migrate

from voiceagent.conversation.session import (
    HandoffEvent,
    InMemorySessionStore,
    SessionState,
    Turn,
    valid_session_id,
)

SETUP = """
import asyncio, json, os, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "voiceagent.settings")
django.setup()
from agents_app.sessions import DjangoSessionStore
from voiceagent.conversation.session import SessionState, Turn, HandoffEvent
store = DjangoSessionStore()
"""


def run(code: str, env: dict) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", SETUP + textwrap.dedent(code)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.redis
def test_state_round_trips_through_redis_and_history_survives_restart(tmp_path):
    env = base_env(tmp_path, CACHE_HOST="127.0.0.1", CACHE_PORT="6379", SESSION_TTL_SECONDS="120")
    migrate(env)
    sid = f"redis-{uuid.uuid4().hex[:8]}"
    run(
        f"""
        async def main():
            state = SessionState(session_id={sid!r}, scenario="banking", active_agent="concierge",
                                 transport="phone")
            state.memory["caller_name"] = "Grace"
            await store.save(state)
            await store.append_turn(state, Turn(role="user", content="my card was stolen", agent="concierge"))
            await store.record_handoff(state, HandoffEvent("concierge", "auth_agent", "announced"))
            state.active_agent = "auth_agent"
            await store.save(state)
            reply = Turn(role="assistant", content="Let me verify you.", agent="auth_agent")
            await store.append_turn(state, reply)
            await store.flush()  # what a conversation's close() does
        asyncio.run(main())
    """,
        env,
    )
    out = run(
        f"""
        async def main():
            state = await store.load({sid!r})
            history = await store.history({sid!r})
            print(json.dumps({{"state": state.to_dict(), "history": [t.as_dict() for t in history]}}))
        asyncio.run(main())
    """,
        env,
    )
    data = json.loads(out)
    assert data["state"]["active_agent"] == "auth_agent" and data["state"]["memory"] == {
        "caller_name": "Grace"
    }
    assert [h["to"] for h in data["state"]["handoffs"]] == ["auth_agent"]
    assert [t["content"] for t in data["history"]] == ["my card was stolen", "Let me verify you."]
    ttl = subprocess.run(
        ["redis-cli", "--scan", "--pattern", f"*session:{sid}"], capture_output=True, text=True
    )
    key = ttl.stdout.strip()
    assert key, "state is stored in Redis"
    remaining = int(subprocess.run(["redis-cli", "ttl", key], capture_output=True, text=True).stdout)
    assert 0 < remaining <= 120

    # a "restart" without the cache: the durable history is still there
    env_no_cache = base_env(tmp_path)
    out = run(
        f"""
        print(json.dumps([t.as_dict() for t in asyncio.run(store.history({sid!r}))]))
    """,
        env_no_cache,
    )
    assert len(json.loads(out)) == 2


async def test_in_memory_store_contract():
    store = InMemorySessionStore()
    state = SessionState(session_id="s1", scenario="default", active_agent="assistant")
    await store.save(state)
    await store.append_turn(state, Turn(role="user", content="hi"))
    await store.record_handoff(state, HandoffEvent("assistant", "specialist", "discrete"))
    loaded = await store.load("s1")
    assert loaded.handoffs[0]["to"] == "specialist"
    assert [t.content for t in await store.history("s1")] == ["hi"]
    assert await store.load("nope") is None


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("abc", True),
        ("A.b:c-d_e", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("", False),
        ("a b", False),
        ("a/b", False),
        (None, False),
    ],
)
def test_session_id_rule(value, ok):
    assert valid_session_id(value) is ok
