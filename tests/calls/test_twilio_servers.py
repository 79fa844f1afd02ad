"""Phone calls through Twilio, on the real server (uvicorn) against the local Twilio peer.

The peer is Twilio on the wire: its REST Calls API (basic auth) takes our calls, it posts the voice
webhook and status callbacks signed with the auth token, and it opens the Media Stream our TwiML
names with a signed upgrade. ``BASE_URL`` is the server's own address, so the URLs Twilio signs
are the ones it reaches. The speech and chat providers are the instant scripted ones
(``bench/plugins/instant_providers.py``) with the service's own rules dialog; every caller
utterance is heard as a request for a person.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import httpx
import pytest
from servers import ROOT, SERVER_START_S, base_env, free_port, migrate, start, wait_http
from twilio_media_client import RATE, sign, silence, tone, twilio_sid
from twilio_peer import TwilioPeer, twilio_env

from voiceagent.conversation.takeover import TRANSFER_FAILED_LINE

pytestmark = pytest.mark.slow

ASKS_FOR_A_PERSON = "can I talk to a real person please"
BANKING_NUMBER = "+15550002222"  # TWILIO_NUMBER_SCENARIOS sends it to the banking scenario
TRANSFER_TARGET = "+15550009999"  # fixtures/scenarios/banking.yaml
CONCIERGE_GREETING = "Hello, thank you for calling. I'm the virtual assistant. How can I help you today?"
ASSISTANT_GREETING = "Hi, thanks for calling. How can I help?"
MS_PER_WORD = 50
TIMEOUT = 15.0


class Server:
    def __init__(self, port: int, log: Path, proc: subprocess.Popen):
        self.port, self.log, self.proc = port, log, proc
        self.base = f"http://127.0.0.1:{port}"
        self.http = f"{self.base}/api/v1"

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


@pytest.fixture(scope="module")
def twilio():
    with TwilioPeer() as peer:
        yield peer


@pytest.fixture(scope="module")
def server(twilio, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("twilio")
    port = free_port()
    env = base_env(
        tmp_path,
        LIFECYCLE_PLUGINS="instant_providers",
        BENCH_MS_PER_WORD=str(MS_PER_WORD),
        BENCH_STT_LINES=ASKS_FOR_A_PERSON,
        BENCH_CHAT="rules",
        TELEPHONY_STREAMING_MODE="MEDIA",
        LOG_LEVEL="INFO",
        PYTHONPATH=os.pathsep.join(
            str(p) for p in (ROOT, ROOT / "tests" / "support", ROOT / "bench" / "plugins")
        ),
        **twilio_env(twilio, f"http://127.0.0.1:{port}", TWILIO_NUMBER_SCENARIOS=f"{BANKING_NUMBER}=banking"),
    )
    for name in ("TELEPHONY_ENDPOINT", "API_KEYS"):
        env.pop(name, None)
    migrate(env)
    log = tmp_path / "server.log"
    proc = start("uvicorn", port, env, log)
    srv = Server(port, log, proc)
    try:
        wait_http(f"{srv.http}/ready", timeout=SERVER_START_S, status=200)
        yield srv
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        if os.environ.get("TWILIO_TEST_LOG"):
            print(srv.tail())


async def poll(fetch, predicate, what: str, timeout: float = TIMEOUT):
    last = None
    try:
        async with asyncio.timeout(timeout):
            while True:
                last = await fetch()
                if predicate(last):
                    return last
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"no {what} within {timeout:g} s; last seen {last!r}") from None


async def call_row(http: httpx.AsyncClient, server: Server, cid: str) -> dict | None:
    response = await http.get(f"{server.http}/calls/", params={"page_size": 100})
    assert response.status_code == 200, response.text
    return next((c for c in response.json()["calls"] if c["connection_id"] == cid), None)


async def speak(client) -> None:
    await client.audio_ms(tone(400, RATE) + silence(1200, RATE))


# --- signatures -------------------------------------------------------------------------------------
def test_webhooks_refuse_what_twilio_did_not_sign(server, twilio):
    voice, status = f"{server.http}/twilio/voice", f"{server.http}/twilio/status"
    form = {
        "AccountSid": twilio.account_sid,
        "CallSid": twilio_sid("CA"),
        "From": "+15550100200",
        "To": "+15550001111",
        "CallStatus": "ringing",
        "Direction": "inbound",
    }
    elsewhere = sign(twilio.auth_token, "https://elsewhere.example.com/api/v1/twilio/voice", form)
    for url in (voice, status):
        for signature in (None, "forged+signature=", elsewhere):  # none, made up, for another URL
            response = twilio.signed_post(url, form, signature=signature)
            assert response.status_code == 403, (url, signature, response.text)
            assert response.json() == {"detail": "Missing or invalid X-Twilio-Signature."}
        # the parameters are signed too: one changed after signing is refused
        good = sign(twilio.auth_token, url, form)
        response = twilio.signed_post(url, {**form, "To": "+15550009999"}, signature=good)
        assert response.status_code == 403, response.text
    # signed, but for another account
    other = {**form, "AccountSid": twilio_sid("AC")}
    response = twilio.signed_post(voice, other)
    assert response.status_code == 403 and "another Twilio account" in response.json()["detail"]
    # signed, but not a call Twilio would send
    response = twilio.signed_post(voice, {**form, "CallSid": "not-a-call-sid"})
    assert response.status_code == 400 and "detail" in response.json(), response.text
    response = twilio.signed_post(status, {**form, "CallStatus": "exploded"})
    assert response.status_code == 400, response.text
    # JSON is not what Twilio sends
    response = httpx.post(voice, json=form, headers={"X-Twilio-Signature": "x"})
    assert response.status_code in (403, 415) and "detail" in response.json(), response.text
    # nothing was created by any of it
    calls = httpx.get(f"{server.http}/calls/", params={"page_size": 100}).json()["calls"]
    assert all(c["connection_id"] != form["CallSid"] for c in calls)


# --- an inbound call --------------------------------------------------------------------------------
async def test_an_inbound_call_talks_takes_dtmf_and_ends_with_stop(server, twilio):
    twilio.reset()
    sid = await asyncio.to_thread(twilio.incoming_call, f"{server.http}/twilio/voice", called="+15550003333")
    url, parameters = twilio.stream_target(sid)
    assert url == f"ws://127.0.0.1:{server.port}/api/v1/twilio/stream"
    assert parameters["scenario"] == "default" and parameters["session_id"]
    session_id = parameters["session_id"]
    # the webhook asked again (Twilio retries): the same session
    again = twilio.signed_post(f"{server.http}/twilio/voice", {**twilio._form(twilio.calls[sid], "ringing")})
    assert again.status_code == 200 and session_id in again.text
    assert again.headers["content-type"].startswith("text/xml")

    async with httpx.AsyncClient(timeout=30) as http:
        row = await call_row(http, server, sid)
        assert (
            row["direction"] == "inbound" and row["status"] == "connected" and row["session_id"] == session_id
        )
        client = await twilio.stream(sid, query="events=1")
        try:
            await client.event("event", TIMEOUT, name="session_started")
            greeting = await client.event("agent_response", TIMEOUT, final=True)
            assert greeting["payload"]["text"] == ASSISTANT_GREETING and greeting["session_id"] == session_id
            await client.until(lambda m: m.get("event") == "mark", TIMEOUT)
            expected = len(ASSISTANT_GREETING.split()) * MS_PER_WORD / 1000
            assert abs(client.audio_seconds() - expected) <= 0.06, client.audio_seconds()
            await client.collect(0.3)
            await speak(client)
            heard = await client.event("transcript", TIMEOUT, final=True)
            assert heard["payload"]["text"] == ASKS_FOR_A_PERSON
            await client.event("agent_response", TIMEOUT, final=True)
            for digit in "42#":
                await client.dtmf(digit)
            keyed = await client.event("transcript", TIMEOUT, final=True)
            assert keyed["payload"]["text"] == "Keypad entry: 42"
            await client.collect(0.3)
            await client.stop()  # the caller hung up
            assert (await client.wait_closed(TIMEOUT))["code"] == 1000
        finally:
            await client.ws.close()
        row = await poll(
            lambda: call_row(http, server, sid), lambda r: r["status"] == "disconnected", "the end"
        )
        assert row["ended_at"] is not None

        def said(response: httpx.Response) -> list[str]:
            return [t["content"] for t in response.json()["history"] if t["role"] == "user"]

        await poll(
            lambda: http.get(f"{server.http}/sessions/{session_id}"),
            lambda r: ASKS_FOR_A_PERSON in said(r) and "Keypad entry: 42" in said(r),
            "the caller's turns in the history",
        )


# --- an outbound call -------------------------------------------------------------------------------
async def test_an_outbound_call_is_placed_reported_and_hung_up_through_twilio(server, twilio):
    twilio.reset()
    async with httpx.AsyncClient(timeout=30) as http:
        twilio.fail_next(400, 21211, "The 'To' number +15551234567 is not a valid phone number.")
        refused = await http.post(f"{server.http}/calls/initiate", json={"phone_number": "+15551234567"})
        assert refused.status_code == 502 and "21211" in refused.json()["detail"], refused.text
        assert twilio.auth_token not in refused.text

        placed = await http.post(
            f"{server.http}/calls/initiate", json={"phone_number": "+15551234567", "scenario": "banking"}
        )
        assert placed.status_code == 202, placed.text
        body = placed.json()
        sid, session_id = body["connection_id"], body["session_id"]
        assert body["status"] == "initiating" and body["scenario"] == "banking" and sid in twilio.calls
        create = [r for r in twilio.requests if r["path"].endswith("/Calls.json")][-1]
        assert create["authorized"]
        form = create["form"]
        assert form["To"] == "+15551234567" and form["From"] == "+15550001111"
        assert form["Url"].startswith(f"{server.base}/api/v1/twilio/voice?session_id={session_id}")
        assert form["StatusCallback"] == f"{server.base}/api/v1/twilio/status"
        # ringing reported (signed) -> the record follows; then the callee answers
        await poll(lambda: call_row(http, server, sid), lambda r: r["status"] == "ringing", "ringing")
        await asyncio.to_thread(twilio.answer, sid)
        url, parameters = twilio.stream_target(sid)
        assert parameters == {"session_id": session_id, "scenario": "banking"}
        row = await call_row(http, server, sid)
        assert row["status"] == "connected" and row["direction"] == "outbound" and row["started_at"]
        assert all(code == 200 for _, code in twilio.calls[sid].statuses_sent), twilio.calls[
            sid
        ].statuses_sent

        client = await twilio.stream(sid, query="events=1")
        try:
            greeting = await client.event("agent_response", TIMEOUT, final=True)
            assert greeting["payload"]["text"] == CONCIERGE_GREETING and greeting["session_id"] == session_id
            await client.until(lambda m: m.get("event") == "mark", TIMEOUT)
            hung = await http.post(f"{server.http}/calls/terminate", json={"connection_id": sid})
            assert hung.status_code == 200 and hung.json() == {"connection_id": sid, "status": "terminating"}
            update = [r for r in twilio.requests if r["path"].endswith(f"/Calls/{sid}.json")][-1]
            assert update["authorized"] and update["form"] == {"Status": "completed"}
            assert (await client.wait_closed(TIMEOUT))["code"] == 1000  # Twilio stopped the stream
        finally:
            await client.ws.close()
        row = await poll(
            lambda: call_row(http, server, sid), lambda r: r["status"] == "disconnected", "the end"
        )
        assert row["ended_at"] is not None
        again = await http.post(f"{server.http}/calls/terminate", json={"connection_id": sid})
        assert again.status_code == 404
    assert twilio.auth_token not in server.log.read_text()  # a secret: never logged


# --- a transfer to a person -------------------------------------------------------------------------
async def ask_for_a_person(client) -> None:
    """The agent's last line has played (its mark came): the caller asks for a person."""
    await client.collect(0.5)
    await speak(client)
    await client.event("tool_call", TIMEOUT, name="escalate_to_human")


async def test_a_caller_who_asks_for_a_person_is_dialled_through_and_comes_back_if_nobody_answers(
    server, twilio
):
    """Refused update: the caller is told, the call goes on. Accepted: <Dial> with an action, our
    stream stops, the call is not hung up. Nobody answers: the action brings the caller back to
    the agent on a new stream of the session (no greeting: the apology). Asked again and the person
    answered and hung up: the action hangs up, the record ends."""
    twilio.reset()
    sid = await asyncio.to_thread(twilio.incoming_call, f"{server.http}/twilio/voice", called=BANKING_NUMBER)
    _, parameters = twilio.stream_target(sid)
    assert parameters["scenario"] == "banking"
    session_id = parameters["session_id"]
    dial = (
        f'<?xml version="1.0" encoding="UTF-8"?><Response><Dial action="{server.base}/api/v1/twilio/dial" '
        f'method="POST">{TRANSFER_TARGET}</Dial></Response>'
    )
    client = await twilio.stream(sid, query="events=1")
    try:
        await client.event("agent_response", TIMEOUT, final=True)
        await client.until(lambda m: m.get("event") == "mark", TIMEOUT)  # the greeting played
        twilio.fail_next(400, 13223, "Dial: Invalid phone number format")  # the first transfer is refused
        await ask_for_a_person(client)
        await client.event("agent_response", TIMEOUT, text=TRANSFER_FAILED_LINE, final=True)
        await client.until(lambda m: m.get("event") == "mark", TIMEOUT)  # the apology played
        assert twilio.calls[sid].updates == []
        await ask_for_a_person(client)  # asked again: dialled this time
        said = [m for m in client.wire if m.get("type") == "agent_response" and m["payload"]["final"]]
        assert (await client.wait_closed(TIMEOUT))["code"] == 1000  # Twilio left our <Connect>
        assert twilio.calls[sid].updates == [dial]
        assert any("connecting you" in m["payload"]["text"] for m in said), said
        # the line about it was heard before the call left us: a mark came after it
        assert client.marks and client.marks[-1][1] == len(client.audio)
    finally:
        await client.ws.close()

    # nobody answered: back to the agent, on the same session, told so (and not greeted again)
    back = await asyncio.to_thread(twilio.dial_result, sid, "no-answer")
    _, again = twilio.stream_target(sid)
    assert again["session_id"] == session_id and "no-answer" in again["transfer_failed"], back
    client = await twilio.stream(sid, query="events=1")
    try:
        first = await client.event("agent_response", TIMEOUT, final=True)
        assert first["payload"]["text"] == TRANSFER_FAILED_LINE
        await client.until(lambda m: m.get("event") == "mark", TIMEOUT)
        await ask_for_a_person(client)  # a third time: the person answers this time, then hangs up
        assert (await client.wait_closed(TIMEOUT))["code"] == 1000
    finally:
        await client.ws.close()
    hung = await asyncio.to_thread(twilio.dial_result, sid, "completed")
    assert "<Hangup />" in hung

    async with httpx.AsyncClient(timeout=30) as http:

        def system_notes(response: httpx.Response) -> list[str]:
            return [t["content"] for t in response.json()["history"] if t["role"] == "system"]

        notes = system_notes(
            await poll(  # the history is written off the audio path: a moment after the call
                lambda: http.get(f"{server.http}/sessions/{session_id}"),
                lambda r: sum(TRANSFER_TARGET in n for n in system_notes(r)) >= 2,
                "both transfers in the history",
            )
        )
        assert any("transfer to a person failed" in n and "13223" in n for n in notes), notes
        assert any("transfer to a person failed" in n and "no-answer" in n for n in notes), notes
        assert sum(TRANSFER_TARGET in n for n in notes) == 2, notes  # dialled twice
        row = await call_row(http, server, sid)
        assert row["status"] == "disconnected" and row["ended_at"] is not None
    # we never hung the call up: the person's side ended it
    assert not [r for r in twilio.requests if r["form"].get("Status") == "completed"]
