"""Acceptance: six phone calls at once, placed through the REST API and streamed by the provider.

Each call is placed with ``POST /calls/initiate`` (the real Call Automation SDK against the local
ACS peer); the provider then connects the call's media stream to ``/media/stream?events=1`` with
its bearer JWT (checked against the JWKS the deployment is configured with), reports the call
connected on ``/calls/callbacks``, and streams the caller's line: 20 ms ``AudioData`` frames of
16 kHz PCM16 (``pcm16KMono``) at real time, silence included. The callers hear the greeting out,
all speak at once - more callers than the speech pools (4) - then interrupt the answer; the calls
are hung up through the API and the provider reports them disconnected.

A Twilio caller, on the same deployment (Twilio configured beside ACS): the voice webhook signed as
Twilio signs it answers TwiML; the Media Stream it names is opened with a signed upgrade and
carries the caller's mu-law 8 kHz line in real time; the caller is greeted, heard and answered,
presses keys, and hangs up (``stop``).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

import httpx
import pytest
import websockets
from acs_media_client import over_websockets
from acs_peer import TEST_BASE_URL
from clients import Dashboard, Microphone, Utterance, is_final_transcript, is_type
from deployments import SHARED_ENV, SHARED_TWILIO_ACCOUNT, SHARED_TWILIO_TOKEN, Deployment, assert_log_clean
from provider_clients import PhoneCaller
from twilio_media_client import TwilioMediaClient, sign, twilio_sid
from voices import mulaw8k, pcm16, voice_for

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

CALLERS = 6
ROUNDS = ("i lost my card", "my card was stolen")
# pools of 4 (the defaults) that make a caller wait at most 1 s for a free recogniser
# (POOL_ACQUIRE_TIMEOUT 1): whoever speaks while four others are still talking must not be
# refused (TELEPHONY_MAX_STREAMS is 200); Twilio's credentials
SERVER_ENV = SHARED_ENV


@dataclass
class Call:
    index: int
    voice: str
    placed: dict = field(default_factory=dict)  # the 202 body of /calls/initiate
    greeting: list[str] = field(default_factory=list)
    greeting_audio_s: float = 0.0
    utterances: list[Utterance] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)  # the ?events=1 messages
    closed: dict | None = None  # how the stream ended
    failure: str | None = None


@dataclass
class Run:
    calls: list[Call]
    dashboard: list[dict]
    listed: dict[str, dict]  # GET /calls/ after the hang-ups, by connection id


async def phone_calls(deployment: Deployment, peers) -> Run:
    voices = [voice_for(i + 1) for i in range(CALLERS)]
    audio = {
        (r, i): await asyncio.to_thread(pcm16, ROUNDS[r], voices[i]) for r in range(2) for i in range(CALLERS)
    }
    results = [Call(i, str(voices[i])) for i in range(CALLERS)]
    async with httpx.AsyncClient(timeout=30, headers=deployment.auth) as http:
        for i, call in enumerate(results):
            body = {"phone_number": f"+1555010{i:04d}", "scenario": "banking"}
            response = await http.post(f"{deployment.http}/calls/initiate", json=body)
            assert response.status_code == 202, response.text
            call.placed = response.json()
        dashboard = await Dashboard.connect(deployment.ws, deployment.api_key)
        lines = await asyncio.gather(
            *(PhoneCaller.connect(deployment.ws, c.placed, peers.jwks.token(), c.voice) for c in results)
        )
        connected = [peers.acs.cloud_event("CallConnected", c.placed["connection_id"]) for c in results]
        response = await http.post(f"{deployment.http}/calls/callbacks", json=connected)
        assert response.status_code == 200 and response.json() == {"processed": CALLERS}, response.text

        async def step(call: Call, what: str, work) -> None:
            if call.failure is None:
                try:
                    await work
                except (AssertionError, TimeoutError) as exc:
                    call.failure = f"{what}: {type(exc).__name__} {exc}"[:300]

        pairs = list(zip(results, lines, strict=True))
        await asyncio.gather(*(step(c, "greeting", line.played()) for c, line in pairs))
        for call, line in pairs:
            call.greeting = [
                m["payload"]["text"] for m in line.inbox.messages if m["type"] == "agent_response"
            ]
            call.greeting_audio_s = len(line.client.audio) / 2 / 16000

        async def converse(call: Call, line) -> None:
            """Round 1 for everyone at once; each caller's round 2 as soon as its own answer has
            begun (waiting for the slowest caller let a fast caller's answer end first on a loaded
            machine: nothing left to interrupt)."""
            for r in range(len(ROUNDS)):
                await step(call, f"round {r + 1}", line.say(ROUNDS[r], audio[r, call.index], dashboard))

        await asyncio.gather(*(converse(c, line) for c, line in pairs))
        for call, line in pairs:  # hang up through the API; the provider ends the stream and reports it
            response = await http.post(
                f"{deployment.http}/calls/terminate", json={"connection_id": call.placed["connection_id"]}
            )
            assert response.status_code == 200, response.text
        await asyncio.gather(*(line.close() for _, line in pairs))
        ended = [peers.acs.cloud_event("CallDisconnected", c.placed["connection_id"]) for c in results]
        response = await http.post(f"{deployment.http}/calls/callbacks", json=ended)
        assert response.status_code == 200, response.text
        for call, line in pairs:
            call.utterances, call.events, call.closed = (
                line.utterances,
                line.inbox.messages,
                line.inbox.closed,
            )
        listed = (await http.get(f"{deployment.http}/calls/", params={"page_size": 100})).json()["calls"]
        await asyncio.sleep(1.0)
        await dashboard.close()
    return Run(results, dashboard.inbox.messages, {c["connection_id"]: c for c in listed})


@pytest.fixture(scope="module")
def run(deployment, peers) -> Run:
    return asyncio.run(phone_calls(deployment, peers))


def test_every_call_is_answered_with_the_greeting(run):
    for call in run.calls:
        assert call.failure is None or not call.failure.startswith("greeting"), call.failure
        assert call.greeting and call.greeting_audio_s > 1.0, call


def test_every_utterance_gets_a_final_transcript_or_a_visible_error(run):
    for call in run.calls:
        assert call.failure is None, f"call {call.index} ({call.voice}): {call.failure}"
        assert len(call.utterances) == len(ROUNDS)
        for utterance in call.utterances:
            assert utterance.transcript or (utterance.error or {}).get("message"), utterance


def test_no_call_is_turned_away_by_a_speech_pool(run):
    """Issue 11 finding 2: speech pools of 4 refused the fifth caller on."""
    errors = [(c.index, m["payload"]) for c in run.calls for m in run.dashboard if m.get("type") == "error"]
    assert not errors, errors
    assert all(u.transcript for c in run.calls for u in c.utterances)


def test_the_agent_answers_and_an_interruption_stops_its_audio(run, deployment):
    for call in run.calls:
        for utterance in call.utterances:
            if utterance.transcript:
                assert utterance.answers and utterance.answer_audio_s > 0, (call.index, utterance)
    # round 2 begins once the caller's round 1 is answered and its audio began: the agent is still
    # speaking for nearly every caller. How soon its words stop the agent depends on the machine's
    # load (bench_turn_taking measures it), and a loaded client's own clock lags, so what the server
    # recorded the caller heard counts with the wire: for most callers the answer they talked over
    # is stopped (StopAudio) or cut short in the history ("cut": the words came between two of its
    # sentences, nothing queued to flush), and some are stopped on the wire.
    # (2026-11-29, loop ~40 ms, quiet and with one or two CPU hogs beside it: 6 of 6 stopped or cut,
    # 2 by StopAudio; the client's clock alone had called 2-4 of them "still speaking" under load)
    interrupting = []
    for call in run.calls:
        if len(call.utterances) == 2 and call.utterances[1].transcript and call.utterances[1].over_agent_s:
            interrupting.append((call, call.utterances[1]))
    assert len(interrupting) >= CALLERS // 2, [(c.index, c.utterances) for c in run.calls]
    stopped = []
    for call, second in interrupting:
        history = httpx.get(
            f"{deployment.http}/sessions/{call.placed['session_id']}", headers=deployment.auth, timeout=10
        ).json()["history"]
        said = [i for i, t in enumerate(history) if t["role"] == "user"]
        answer = [t.get("heard") for t in history[said[0] + 1 : said[1]] if t["role"] == "assistant"]
        assert answer and set(answer) <= {"cut", "played"}, (call.index, history)
        if second.barged_in or "cut" in answer:
            stopped.append(call.index)
    assert len(stopped) > len(interrupting) // 2, (stopped, interrupting)
    assert any(u.barged_in for _, u in interrupting), interrupting


def test_the_calls_are_listed_as_ended_and_their_history_kept(run, deployment):
    for call in run.calls:
        listed = run.listed[call.placed["connection_id"]]
        assert listed["status"] == "disconnected" and listed["session_id"] == call.placed["session_id"]
        said = [u.transcript for u in call.utterances if u.transcript]
        for _ in range(2 * deployment.workers):  # fresh connections: every worker answers some
            body = httpx.get(
                f"{deployment.http}/sessions/{call.placed['session_id']}", headers=deployment.auth, timeout=10
            ).json()
            assert (body["transport"], body["scenario"]) == ("phone", "banking")
            assert [t["content"] for t in body["history"] if t["role"] == "user"] == said


def test_the_dashboard_follows_every_call(run):
    for call in run.calls:
        seen = [m for m in run.dashboard if m.get("session_id") == call.placed["session_id"]]
        assert any(is_type("event", name="session_started")(m) for m in seen), call.index
        said = [m["payload"]["text"] for m in call.events if is_final_transcript(m)]
        assert [m["payload"]["text"] for m in seen if is_final_transcript(m)] == said


async def twilio_call(deployment: Deployment) -> tuple[TwilioMediaClient, str, dict]:
    """An inbound Twilio call: the signed webhook, then the stream it names, signed, started."""
    account, token = SHARED_TWILIO_ACCOUNT, SHARED_TWILIO_TOKEN
    call_sid = twilio_sid("CA")
    public = f"{TEST_BASE_URL}/api/v1/twilio/voice?scenario=banking"
    form = {"AccountSid": account, "CallSid": call_sid, "From": "+15550107777", "To": "+15550001111"}
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(
            f"{deployment.http}/twilio/voice?scenario=banking",
            data=form,
            headers={"X-Twilio-Signature": sign(token, public, form)},
        )
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/xml"), answer.text
    session_id = re.search(r'name="session_id" value="([^"]+)"', answer.text).group(1)
    assert 'url="wss://voice.example.com/api/v1/twilio/stream"' in answer.text
    signature = sign(token, "wss://voice.example.com/api/v1/twilio/stream?events=1")
    ws = await websockets.connect(
        f"{deployment.ws}/twilio/stream?events=1", additional_headers={"X-Twilio-Signature": signature}
    )
    client = TwilioMediaClient(over_websockets(ws), account_sid=account, call_sid=call_sid)
    client.ws = ws
    await client.begin({"session_id": session_id, "scenario": "banking"})
    return client, session_id, form


def test_a_twilio_caller_is_greeted_heard_answered_and_hangs_up(deployment):
    async def call() -> None:
        client, session_id, _ = await twilio_call(deployment)
        mic = Microphone(client.frame, b"\xff" * 160)  # the line: mu-law silence between words
        mic.start()
        try:
            greeting = await client.event("agent_response", 30, final=True)
            assert greeting["session_id"] == session_id and greeting["payload"]["agent"] == "concierge"
            await client.until(lambda m: m.get("event") == "mark", 30)  # the greeting played out
            assert client.audio_seconds() > 2.0
            await mic.say(await asyncio.to_thread(mulaw8k, "i lost my card", voice_for(2)))
            heard = await client.event("transcript", 30, final=True)
            assert "lost" in heard["payload"]["text"].lower(), heard
            before = client.audio_seconds()
            await client.event("agent_response", 30, final=True)
            await client.until(lambda m: m.get("event") == "media", 30)
            assert client.audio_seconds() > before
            for digit in "12#":
                await client.dtmf(digit)
            keyed = await client.until(
                lambda m: m.get("type") == "transcript" and m["payload"]["text"].startswith("Keypad entry"),
                30,
            )
            assert keyed["payload"]["text"] == "Keypad entry: 12"
            await mic.stop()
            await client.stop()
            assert (await client.wait_closed(30))["code"] == 1000
        finally:
            await mic.stop()
            await client.ws.close()
        async with httpx.AsyncClient(timeout=30, headers=deployment.auth) as http:
            calls = (await http.get(f"{deployment.http}/calls/", params={"page_size": 100})).json()["calls"]
        (row,) = [c for c in calls if c["connection_id"] == client.call_sid]
        assert (row["direction"], row["status"], row["scenario"]) == ("inbound", "disconnected", "banking")

    asyncio.run(call())


def test_server_log_is_clean(deployment):
    """Its shutdown is in the check of the last module lent the deployment (conftest): found by
    this suite, the Call Automation SDK's aiohttp session was never closed at shutdown (no step
    called TelephonyClient.close), and daphne's exit logged its ``__del__`` tracebacks, which
    count as incidents there (``Exception ignored in``)."""
    assert_log_clean(deployment)
