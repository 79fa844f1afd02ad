"""Acceptance: a contact center bridges six callers to the agents at once over AudioHook v2.

Each session is a strict AudioHook client (it checks every server message's version, id and
sequence numbers): it opens with PCMU 8 kHz mono and the banking prompt, streams the caller's
line as mu-law in 20 ms frames at real time, silence included, hears the greeting out, says a
sentence (espeak-ng, several voices) and hears the answer, then closes. The bridge runs on the
realtime voice API, here the local realtime peer in its own process: it detects speech by level,
transcribes every turn as "hello" and answers with a fixed sentence.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import httpx
import pytest
from clients import Dashboard, Utterance, is_final_transcript, is_type
from deployments import SHARED_CONTACTCENTER_KEY, SHARED_ENV, Deployment, assert_log_clean
from peers import ANSWER
from provider_clients import ContactCenterCaller
from voices import mulaw8k, voice_for

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

SESSIONS = 6
SENTENCE = "what is my balance"
SERVER_ENV = SHARED_ENV  # CONTACTCENTER_MAX_SESSIONS keeps its default (200)


@dataclass
class Session:
    index: int
    voice: str
    session_id: str = ""
    opened: dict = field(default_factory=dict)
    greeting_audio_s: float = 0.0
    utterances: list[Utterance] = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)  # text messages after `opened`
    violations: list[str] = field(default_factory=list)  # protocol violations the client saw
    closed: dict | None = None  # the `closed` answer to our `close`
    failure: str | None = None


@dataclass
class Run:
    sessions: list[Session]
    dashboard: list[dict]


async def contact_center(deployment: Deployment) -> Run:
    voices = [voice_for(i + 2) for i in range(SESSIONS)]
    audio = [await asyncio.to_thread(mulaw8k, SENTENCE, v) for v in voices]
    results = [Session(i, str(v)) for i, v in enumerate(voices)]
    dashboard = await Dashboard.connect(deployment.ws, deployment.api_key)
    key = SHARED_CONTACTCENTER_KEY
    callers = await asyncio.gather(*(ContactCenterCaller.connect(deployment.ws, str(v), key) for v in voices))

    async def session(result: Session, caller: ContactCenterCaller) -> None:
        result.session_id = caller.session_id
        try:
            result.opened = await caller.open()
            await caller.quiet()  # the greeting, heard out
            result.greeting_audio_s = caller.audio_s()
            await caller.say(SENTENCE, audio[result.index])
        except (AssertionError, TimeoutError) as exc:
            result.failure = f"{type(exc).__name__} {exc}"[:300]
        result.utterances = caller.utterances
        result.closed = await caller.close()
        result.messages, result.violations = caller.inbox.messages, caller.violations

    await asyncio.gather(*(session(r, c) for r, c in zip(results, callers, strict=True)))
    await asyncio.sleep(1.0)
    await dashboard.close()
    return Run(results, dashboard.inbox.messages)


@pytest.fixture(scope="module")
def run(deployment) -> Run:
    return asyncio.run(contact_center(deployment))


def test_every_session_opens_and_is_greeted(run):
    for session in run.sessions:
        assert session.opened.get("type") == "opened", (session.index, session.opened, session.failure)
        assert session.greeting_audio_s > 0.2, (session.index, session.failure)


def test_every_utterance_is_answered_with_audio(run):
    for session in run.sessions:
        assert session.failure is None, f"session {session.index} ({session.voice}): {session.failure}"
        (utterance,) = session.utterances
        assert utterance.answer_audio_s > 0.5, (session.index, utterance)
        assert not [m for m in session.messages if m["type"] == "disconnect"], session.messages


def test_every_session_follows_the_protocol_and_closes_as_it_says(run):
    for session in run.sessions:
        assert not session.violations, (session.index, session.violations)
        assert session.closed is not None and session.closed["type"] == "closed", (
            session.index,
            session.closed,
        )


def test_the_dashboard_shows_each_turn_transcribed_and_answered(run):
    for session in run.sessions:
        seen = [m for m in run.dashboard if m.get("session_id") == session.session_id]
        assert any(is_type("event", name="session_started")(m) for m in seen), session.index
        assert len([m for m in seen if is_final_transcript(m)]) == len(session.utterances), seen
        assert any(is_type("response", final=True)(m) and m["payload"]["text"] == ANSWER for m in seen)


def test_the_history_is_readable_on_every_worker(run, deployment):
    for session in run.sessions:
        for _ in range(2 * deployment.workers):
            response = httpx.get(
                f"{deployment.http}/sessions/{session.session_id}", headers=deployment.auth, timeout=10
            )
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["transport"] == "contactcenter"
            roles = [t["role"] for t in body["history"]]
            assert roles.count("user") == len(session.utterances) and "assistant" in roles, body["history"]


def test_server_log_is_clean(deployment):
    assert_log_clean(deployment)
