"""The banking demo as a caller meets it at the web page, over real servers: the browser socket,
typed turns (speech is not the point here), the offline dialog and the built-in tools.

Two uvicorn processes share Redis and a database (the README's scale-out shape) and a third runs
alone on local memory (``scripts/run``'s shape): a profile attached to a live session reaches the
conversation on whichever worker holds it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid

import httpx
import pytest
import redis
import websockets
import yaml
from servers import ROOT, base_env, free_port, migrate, start, stop_all, wait_http

pytestmark = [pytest.mark.slow, pytest.mark.redis]

REDIS_DB = 7  # 0 test_redis, 2 multiprocess relay, 3 relay shutdown, 5 telephony, 11-15 acceptance, faults
TIMEOUT_S = 30.0


def _serve(tmp_path, names: list[str], **extra: str):
    env = base_env(tmp_path, STT_POOL_SIZE="1", TTS_POOL_SIZE="1", LOG_LEVEL="INFO", **extra)
    migrate(env)
    ports = [free_port() for _ in names]
    logs = [tmp_path / f"{name}.log" for name in names]
    procs = [start("uvicorn", port, env, log) for port, log in zip(ports, logs, strict=True)]
    try:
        for port in ports:
            wait_http(f"http://127.0.0.1:{port}/api/v1/ready", 60, 200)
    except BaseException:
        stop_all(procs, logs, within_s=30)
        raise
    return [f"127.0.0.1:{p}" for p in ports], procs, logs


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    """Two uvicorn processes on one Redis and one database: their ``host:port``."""
    redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB).flushdb()
    tmp_path = tmp_path_factory.mktemp("demo-workers")
    hosts, procs, logs = _serve(
        tmp_path, ["a", "b"], CACHE_HOST="127.0.0.1", CACHE_PORT="6379", CACHE_DB=str(REDIS_DB)
    )
    try:
        yield hosts
    finally:
        stop_all(procs, logs, within_s=60)
        redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB).flushdb()


@pytest.fixture(scope="module")
def lone(tmp_path_factory):
    """One uvicorn process on local memory (the in-memory channel layer), as ``scripts/run`` runs."""
    hosts, procs, logs = _serve(tmp_path_factory.mktemp("demo-lone"), ["lone"])
    try:
        yield hosts[0]
    finally:
        stop_all(procs, logs, within_s=60)


class Caller:
    """The web page's conversation socket: what was sent back, in order."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.messages: list[dict] = []
        self.session_id = ""

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(cls, host: str, session_id: str | None = None):
        query = f"?session_id={session_id}" if session_id else ""
        url = f"ws://{host}/api/v1/browser/conversation{query}"
        async with websockets.connect(url, max_size=2**24) as ws:
            caller = cls(ws)
            started = await caller.until(lambda m: m["payload"].get("name") == "session_started")
            caller.session_id = started["session_id"]
            await caller.send("config", {"scenario": "banking"})
            yield caller

    async def send(self, type_: str, payload: dict) -> None:
        await self.ws.send(json.dumps({"type": type_, "payload": payload}))

    async def until(self, predicate, start: int | None = None) -> dict:
        """The first message from ``start`` (default: the next one) that matches; waits for it."""
        i = len(self.messages) if start is None else start
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                while i < len(self.messages):
                    if predicate(self.messages[i]):
                        return self.messages[i]
                    i += 1
                message = json.loads(await self.ws.recv())
                if message["type"] == "audio":  # long: only that it came, and when
                    message = {"type": "audio", "payload": {}}
                self.messages.append(message)

    async def type(self, text: str) -> list[dict]:
        """Type a line; the messages up to the agents' listening again after answering it (a
        greeting said before the answer included)."""
        start = len(self.messages)
        await self.send("text", {"text": text})
        await self.until(lambda m: m["type"] == "transcript" and m["payload"]["text"] == text, start)
        await self.until(is_state("thinking"), start)
        await self.until(is_state("listening"))
        return self.messages[start:]


def is_state(name: str):
    return lambda m: m["type"] == "event" and m["payload"].get("state") == name


def greeting(agent: str) -> str:
    return yaml.safe_load((ROOT / "fixtures" / "agents" / agent / "agent.yaml").read_text())["greeting"]


def responses(messages: list[dict]) -> list[dict]:
    return [m["payload"] for m in messages if m["type"] == "response" and m["payload"]["final"]]


def tool_calls(messages: list[dict]) -> list[dict]:
    return [m["payload"] for m in messages if m["type"] == "event" and m["payload"]["name"] == "tool_call"]


def sentences(text: str) -> list[str]:
    return [s.strip().lower() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


async def attach_profile(host: str, session_id: str, seed: int = 7) -> dict:
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(
            f"http://{host}/api/v1/profiles/generate",
            json={"seed": seed, "scenario": "banking", "session_id": session_id},
        )
    assert response.status_code == 201, response.text
    return response.json()


# --- 1. "In this demo you can also just say: yes, that's me" ------------------------------------------
@pytest.mark.parametrize("confirm", ["Yes, that's me.", "yes it's me", "That's me", "yes that is me"])
async def test_saying_yes_thats_me_verifies_the_caller_as_the_demo_promises(lone, confirm):
    async with Caller.connect(lone) as caller:  # as the web page does it: no profile made first
        asked = responses(await caller.type("I lost my card"))
        assert any("yes, that's me" in r["text"] or "full name" in r["text"] for r in asked), asked
        turn = await caller.type(confirm)
    calls = {c["tool"]: c for c in tool_calls(turn)}
    assert calls.get("verify_client_identity", {}).get("result", {}).get("verified") is True, turn
    assert calls["send_mfa_code"]["result"]["sent"] is True
    said = " ".join(r["text"] for r in responses(turn))
    assert "one-time code" in said and "yes, that's me" not in said


async def test_yes_thats_me_verifies_as_the_profile_the_session_was_given(lone):
    session = f"demo-{uuid.uuid4().hex[:8]}"
    profile = await attach_profile(lone, session, seed=3)
    async with Caller.connect(lone, session) as caller:
        await caller.type("I lost my card")
        turn = await caller.type("yes, that's me")
    (verify,) = [c for c in tool_calls(turn) if c["tool"] == "verify_client_identity"]
    assert verify["args"]["full_name"] == profile["full_name"] and verify["result"]["verified"] is True


# --- 2. a profile attached to a live session reaches its conversation -----------------------------------
@pytest.mark.parametrize("where", ["on another worker", "in the same process"])
async def test_a_profile_attached_to_a_live_session_reaches_its_conversation(request, where):
    if where == "on another worker":
        rest, talk = request.getfixturevalue("workers")  # REST on worker a, the conversation on b
    else:
        rest = talk = request.getfixturevalue("lone")
    session = f"live-{uuid.uuid4().hex[:8]}"
    async with Caller.connect(talk, session) as caller:
        await caller.type("hello")  # the conversation is live, its state held by its worker
        profile = await attach_profile(rest, session, seed=7)
        await caller.type("I lost my card")
        turn = await caller.type("yes, that's me")
        async with httpx.AsyncClient(timeout=30) as client:
            memory = (await client.get(f"http://{rest}/api/v1/sessions/{session}")).json()["memory"]
    calls = tool_calls(turn)
    assert "attach_demo_caller" not in [c["tool"] for c in calls], "the conversation saw no profile"
    (verify,) = [c for c in calls if c["tool"] == "verify_client_identity"]
    assert verify["args"]["full_name"] == profile["full_name"] and verify["result"]["verified"] is True
    assert memory["caller_name"] == profile["full_name"]  # its saves kept the profile
    assert memory["caller_profile"]["id"] == profile["id"]


# --- 3. a conversation started by typing is greeted ----------------------------------------------------
async def test_a_conversation_started_by_typing_is_greeted_first_then_answered(lone):
    async with Caller.connect(lone) as caller:  # nothing before it: the typed line starts it
        turn = await caller.type("what can you do")
    said = [m for m in turn if m["type"] == "response" and m["payload"]["final"]]
    assert [m["payload"]["agent"] for m in said] == ["concierge", "concierge"], said
    hello, answer = (turn.index(m) for m in said)
    assert said[0]["payload"]["text"] == greeting("concierge")
    assert "lost or stolen card" in said[1]["payload"]["text"]
    assert any(m["type"] == "audio" for m in turn[hello:answer]), "the greeting was not heard"
    assert not [m for m in turn if m["payload"].get("name") == "barge_in"], "the greeting was cut"


# --- 4. two agents never say the same sentence back to back ---------------------------------------------
async def test_the_banking_handoff_path_never_repeats_a_sentence_back_to_back(lone):
    from agents_app.builtin_tools import expected_mfa_code

    session = f"demo-{uuid.uuid4().hex[:8]}"
    profile = await attach_profile(lone, session, seed=3)
    heard: list[dict] = []
    async with Caller.connect(lone, session) as caller:
        for line in ("I lost my card", "yes, that's me", f"my code is {expected_mfa_code(session, profile)}"):
            heard += responses(await caller.type(line))
        heard += responses(await caller.type("that's all"))
    agents = [r["agent"] for r in heard]  # the greeting, then concierge -> auth -> cards -> concierge
    assert agents[:3] == ["concierge", "concierge", "auth_agent"], heard
    assert agents[-2:] == ["cards_agent", "concierge"], heard
    for before, after in zip(heard, heard[1:], strict=False):
        if before["agent"] != after["agent"]:  # a handoff: the new agent's first words
            repeated = set(sentences(before["text"])) & set(sentences(after["text"]))
            assert not repeated, f"{before['agent']} then {after['agent']} both said {repeated}"


# --- 5. a person takes the conversation over (issue 32), whichever worker holds it ---------------------
async def _post(host: str, path: str, body: dict | None = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(f"http://{host}/api/v1/{path}", json=body)


def events(messages: list[dict], name: str) -> list[dict]:
    return [m["payload"] for m in messages if m["type"] == "event" and m["payload"].get("name") == name]


async def _played(host: str, session: str, line: str) -> None:
    """Until the history says the caller heard ``line`` in full (corrected once it has played)."""
    async with httpx.AsyncClient(timeout=30) as client, asyncio.timeout(TIMEOUT_S):
        while True:
            history = (await client.get(f"http://{host}/api/v1/sessions/{session}")).json()["history"]
            if any(t["content"] == line and t.get("heard") == "played" for t in history):
                return
            await asyncio.sleep(0.2)


async def test_a_person_takes_over_a_conversation_on_another_worker_speaks_and_hands_back(workers):
    rest, talk = workers  # REST on worker a, the conversation on b
    session = f"takeover-{uuid.uuid4().hex[:8]}"
    async with Caller.connect(talk, session) as caller:
        await caller.type("hello")
        taken = await _post(rest, f"sessions/{session}/takeover", {"by": "alice"})
        assert taken.status_code == 200, taken.text
        assert taken.json() == {"session_id": session, "taken_over": True, "by": "alice"}
        await caller.until(lambda m: m["type"] == "event" and m["payload"].get("name") == "takeover")
        again = await _post(rest, f"sessions/{session}/takeover", {"by": "bob"})
        assert again.status_code == 409 and "alice" in again.json()["detail"]

        start = len(caller.messages)  # the caller types while the person has the call: not answered
        await caller.send("text", {"text": "I want to talk to a person"})
        await caller.until(lambda m: m["type"] == "transcript" and "a person" in m["payload"]["text"], start)
        await caller.until(is_state("listening"), start)
        said = await _post(rest, f"sessions/{session}/say", {"text": "Hi, this is Alice from the bank."})
        assert said.status_code == 200 and said.json()["by"] == "alice", said.text
        line = await caller.until(
            lambda m: m["type"] == "response" and m["payload"].get("by") == "alice", start
        )
        assert line["payload"]["text"] == "Hi, this is Alice from the bank."
        await caller.until(lambda m: m["type"] == "audio", start)  # spoken in the agent's voice
        await caller.until(is_state("listening"))
        agent_lines = [r for r in responses(caller.messages[start:]) if not r.get("by")]
        assert agent_lines == [], f"the agent answered while a person had the call: {agent_lines}"
        await _played(rest, session, "Hi, this is Alice from the bank.")  # the caller heard all of it

        back = await _post(rest, f"sessions/{session}/handback")
        assert back.status_code == 200 and back.json()["answering"] is False, back.text  # Alice spoke last
        await caller.until(lambda m: m["type"] == "event" and m["payload"].get("name") == "handback")
        assert responses(await caller.type("what can you do")), "the agent did not answer after the handback"
        async with httpx.AsyncClient(timeout=30) as client:
            history = (await client.get(f"http://{rest}/api/v1/sessions/{session}")).json()["history"]
    person = [t for t in history if t.get("speaker") == "person"]
    assert [(t["role"], t["agent"]) for t in person] == [
        ("system", "alice"),
        ("assistant", "alice"),
        ("system", "alice"),
    ], person
    assert person[1]["content"] == "Hi, this is Alice from the bank."
    assert any(t["role"] == "user" and t["content"] == "I want to talk to a person" for t in history)


async def test_takeover_requests_are_refused_clearly(workers):
    rest, _ = workers
    unknown = await _post(rest, "sessions/no-such-session/takeover")
    assert unknown.status_code == 404 and "live" in unknown.json()["detail"]
    for path, body in [
        ("sessions/x/takeover", {"by": "<script>"}),
        ("sessions/x/takeover", {"who": "alice"}),
        ("sessions/x/say", {}),
        ("sessions/x/say", {"text": "x" * 1001}),
        ("sessions/bad%20id/handback", None),
    ]:
        refused = await _post(rest, path, body)
        assert refused.status_code == 400 and refused.json()["detail"], (path, body, refused.text)
    async with Caller.connect(rest) as caller:
        await caller.type("hello")
        not_taken = await _post(rest, f"sessions/{caller.session_id}/say", {"text": "hello"})
        assert not_taken.status_code == 409 and "not taken over" in not_taken.json()["detail"]
        assert (await _post(rest, f"sessions/{caller.session_id}/handback")).status_code == 409


async def test_asking_for_a_person_in_the_browser_asks_the_dashboards_for_one(lone):
    """Issue 32 point 2 on the browser: escalate_to_human becomes a takeover request on the
    dashboard (there is no phone call to transfer); the conversation goes on meanwhile."""
    session = f"ask-{uuid.uuid4().hex[:8]}"
    relay_url = f"ws://{lone}/api/v1/browser/dashboard/relay?session_id={session}"
    async with websockets.connect(relay_url) as relay, Caller.connect(lone, session) as caller:
        turn = await caller.type("can I talk to a real person please")
        assert "escalate_to_human" in [c["tool"] for c in tool_calls(turn)], turn
        assert events(turn, "transfer_requested"), "the caller's page was not told"
        asked = None
        async with asyncio.timeout(TIMEOUT_S):
            while asked is None:
                message = json.loads(await relay.recv())
                if message["type"] == "event" and message["payload"].get("name") == "takeover_requested":
                    asked = message["payload"]
        assert asked["reason"] == "caller asked for a person" and asked["reference"].startswith("ESC-")
        assert responses(await caller.type("hello")), "the conversation did not go on"
