"""Acceptance: hostile input from the providers' side, generated (Hypothesis), against the real
server - the phone media stream (ACS frames), Twilio Media Streams and the AudioHook v2 bridge.

Twilio (docs/api.md): after a genuine signed ``start``, any frame may only close the stream with a
documented code (1000 ``stop``, 1003 binary, 1007 invalid JSON or payload, 1008 a frame on another
streamSid or a second start, 1009 too big), never 1011; unknown events are dropped and counted.

Media stream (docs/api.md): the provider reads no answers, so a message the service cannot use is
dropped and counted in ``/media/status``, and the stream goes on; the socket may only close with a
documented code (1003 for a sample rate other than 16000/24000, 1009 too big), never 1011.
AudioHook: every server message must pass the strict client's protocol checks (version, ids,
sequence numbers), a session ends only with ``disconnect`` (``completed``, ``error`` with an
``info``, ``unauthorized``) and close code 1000. Both: another caller's browser conversation keeps
answering, and the server logs no error.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid

import httpx
import pytest
import websockets
from acs_peer import TEST_BASE_URL
from audiohook_client import ORG, AudioHookClient
from audiohook_client import over_websockets as audiohook_socket
from deployments import (
    SHARED_CONTACTCENTER_KEY,
    SHARED_ENV,
    SHARED_TWILIO_ACCOUNT,
    SHARED_TWILIO_TOKEN,
    Deployment,
    assert_log_clean,
)
from hostile import ANY_JSON, FUZZ_SETTINGS, Bystander
from hypothesis import given, settings
from hypothesis import strategies as st
from twilio_media_client import sign, twilio_sid
from websockets.exceptions import ConnectionClosed

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

CC_KEY = SHARED_CONTACTCENTER_KEY
# TELEPHONY_MAX_MESSAGE_BYTES 8192, REPROMPT_AFTER_S 0 (the bystander is silent while the fuzz runs),
# Twilio beside ACS, the contact-centre key
SERVER_ENV = SHARED_ENV
QUIET_S = 0.3  # AudioHook: a session with nothing more to say
READ_S = 0.5  # media: what a stream answers within this after the batch

# --- the phone media stream ----------------------------------------------------------------------
PCM = st.binary(max_size=700).map(lambda b: base64.b64encode(b).decode())
MEDIA_BODIES = {
    "AudioData": st.fixed_dictionaries(
        {},
        optional={
            "data": PCM | st.sampled_from(["", "not base64!", "AAA=", "A" * 9000]) | ANY_JSON,
            "timestamp": ANY_JSON,
            "silent": st.booleans() | ANY_JSON,
            "participantRawID": ANY_JSON,
        },
    ),
    "AudioMetadata": st.fixed_dictionaries(
        {},
        optional={
            "sampleRate": st.sampled_from([16000, 24000, 16000.0, 24000.0, 8000, "16000", True, None])
            | ANY_JSON,
            "encoding": ANY_JSON,
            "channels": ANY_JSON,
            "length": ANY_JSON,
        },
    ),
    "DtmfData": st.fixed_dictionaries({}, optional={"data": st.text("0123456789*#ABCDx ") | ANY_JSON}),
}


def _media(kind: str, body, upper: bool) -> str:
    """An ACS frame; ``upper``: the other casing the provider's samples use (``Kind``/``AudioData``)."""
    field = kind[0].lower() + kind[1:]
    key, name = ("Kind", kind) if upper else ("kind", field)
    return json.dumps({key: kind, name: body})


MEDIA_MESSAGE = st.one_of(
    *(st.builds(_media, st.just(kind), body, st.booleans()) for kind, body in MEDIA_BODIES.items()),
    st.builds(lambda kind, body: json.dumps({"kind": kind, "data": body}), st.text(max_size=12), ANY_JSON),
    ANY_JSON.map(json.dumps),
    st.text(max_size=40),
    st.binary(max_size=64),
)


async def _place_call(deployment: Deployment) -> dict:
    async with httpx.AsyncClient(timeout=30, headers=deployment.auth) as http:
        answer = await http.post(
            f"{deployment.http}/calls/initiate", json={"phone_number": "+15551230002", "scenario": "banking"}
        )
    assert answer.status_code == 202, answer.text
    return answer.json()


async def _media_exchange(
    deployment: Deployment, token: str, batch: list
) -> tuple[list[dict], int | None, str]:
    call = await _place_call(deployment)
    headers = {"Authorization": f"Bearer {token}", "x-ms-call-connection-id": call["connection_id"]}
    received: list[dict] = []
    async with websockets.connect(
        f"{deployment.ws}/media/stream?events=1", additional_headers=headers, max_queue=None, open_timeout=30
    ) as ws:
        try:
            for message in batch:
                await ws.send(message)
                await asyncio.sleep(0.01)
            async with asyncio.timeout(READ_S):  # the agent's audio flows on: read a while, then hang up
                async for raw in ws:
                    if isinstance(raw, str):
                        received.append(json.loads(raw))
        except (ConnectionClosed, TimeoutError):
            pass
        return received, ws.close_code, ws.close_reason or ""


@pytest.mark.timeout(600)
def test_hostile_media_frames_are_dropped_and_counted_and_touch_no_one_else(
    deployment: Deployment, peers, bystander: Bystander
):
    drops_before = httpx.get(f"{deployment.http}/media/status", headers=deployment.auth).json()
    outcomes: dict[str, int] = {}

    @settings(FUZZ_SETTINGS, max_examples=40)
    @given(st.lists(MEDIA_MESSAGE, min_size=1, max_size=8))
    def fuzz(batch: list) -> None:
        received, code, reason = asyncio.run(_media_exchange(deployment, peers.jwks.token(), batch))
        outcomes[f"close {code}"] = outcomes.get(f"close {code}", 0) + 1
        assert not [m for m in received if m.get("type") == "error"], (received, batch)
        if code == 1003:
            assert reason.startswith("unsupported sampleRate"), reason
        else:
            assert code in (None, 1000, 1009), (code, reason, batch)

    fuzz()
    drops = httpx.get(f"{deployment.http}/media/status", headers=deployment.auth).json()["dropped_messages"]
    dropped = {k: n - drops_before["dropped_messages"].get(k, 0) for k, n in drops.items()}
    if deployment.workers == 1:  # one process holds every stream's count
        assert {"malformed", "bad_audio", "unknown_kind", "binary"} <= {k for k, n in dropped.items() if n}, (
            dropped
        )
    assert "close 1003" in outcomes, outcomes  # the fuzz reached past the frame into the metadata checks
    assert bystander.answers("hello"), bystander.received[-10:]
    assert not bystander.errors(), bystander.errors()


# --- Twilio Media Streams ------------------------------------------------------------------------
TWILIO_ACCOUNT, TWILIO_TOKEN = SHARED_TWILIO_ACCOUNT, SHARED_TWILIO_TOKEN
MULAW = st.binary(max_size=400).map(lambda b: base64.b64encode(b).decode())
TWILIO_BODIES = {
    "media": st.fixed_dictionaries(
        {},
        optional={
            "payload": MULAW | st.sampled_from(["", "not base64!", "A" * 9000]) | ANY_JSON,
            "track": ANY_JSON,
        },
    ),
    "dtmf": st.fixed_dictionaries({}, optional={"digit": st.text("0123456789*#ABx", max_size=3) | ANY_JSON}),
    "mark": st.fixed_dictionaries({}, optional={"name": ANY_JSON}),
    "stop": st.fixed_dictionaries({}, optional={"callSid": ANY_JSON}),
    "start": st.fixed_dictionaries({}, optional={"callSid": ANY_JSON, "mediaFormat": ANY_JSON}),
}


def _twilio(event: str, body, same_stream: bool, stream_sid: str) -> str:
    message = {"event": event, "streamSid": stream_sid if same_stream else twilio_sid("MZ"), event: body}
    return json.dumps(message)


TWILIO_MESSAGE = st.one_of(
    *(
        st.builds(_twilio, st.just(event), body, st.booleans() | st.just(True), st.just("{sid}"))
        for event, body in TWILIO_BODIES.items()
    ),
    st.builds(
        lambda event, body: json.dumps({"event": event, "streamSid": "{sid}", "x": body}),
        st.text(max_size=12),
        ANY_JSON,
    ),
    ANY_JSON.map(json.dumps),
    st.text(max_size=40),
    st.binary(max_size=64),
)
TWILIO_CLOSES = {
    1000: ("the call ended",),
    1003: ("binary frames",),
    1007: ("a message that is not", "media payload is not base64", "media without a payload"),
    1008: ("unknown streamSid", "a second start"),
    1009: ("message too big",),
}


async def _twilio_exchange(deployment: Deployment, batch: list) -> tuple[list[dict], int | None, str]:
    """A call answered through the signed voice webhook, its stream opened and started as Twilio
    does, then the batch."""
    call_sid, stream_sid = twilio_sid("CA"), twilio_sid("MZ")
    form = {"AccountSid": TWILIO_ACCOUNT, "CallSid": call_sid, "From": "+15551230003", "To": "+15550001111"}
    signature = sign(TWILIO_TOKEN, f"{TEST_BASE_URL}/api/v1/twilio/voice", form)
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(
            f"{deployment.http}/twilio/voice", data=form, headers={"X-Twilio-Signature": signature}
        )
    assert answer.status_code == 200, answer.text
    session_id = answer.text.split('name="session_id" value="')[1].split('"')[0]
    public = "wss://voice.example.com/api/v1/twilio/stream?events=1"
    received: list[dict] = []
    headers = {"X-Twilio-Signature": sign(TWILIO_TOKEN, public)}
    async with websockets.connect(
        f"{deployment.ws}/twilio/stream?events=1", additional_headers=headers, max_queue=None, open_timeout=30
    ) as ws:
        start = {
            "accountSid": TWILIO_ACCOUNT,
            "streamSid": stream_sid,
            "callSid": call_sid,
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            "customParameters": {"session_id": session_id},
        }
        try:
            await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
            await ws.send(json.dumps({"event": "start", "start": start, "streamSid": stream_sid}))
            for message in batch:
                await ws.send(message.replace("{sid}", stream_sid) if isinstance(message, str) else message)
                await asyncio.sleep(0.01)
            async with asyncio.timeout(READ_S):
                async for raw in ws:
                    if isinstance(raw, str):
                        received.append(json.loads(raw))
        except (ConnectionClosed, TimeoutError):
            pass
        return received, ws.close_code, ws.close_reason or ""


@pytest.mark.timeout(600)
def test_hostile_twilio_frames_close_only_with_documented_codes(deployment: Deployment, bystander: Bystander):
    outcomes: dict[str, int] = {}

    @settings(FUZZ_SETTINGS, max_examples=40)
    @given(st.lists(TWILIO_MESSAGE, min_size=1, max_size=8))
    def fuzz(batch: list) -> None:
        received, code, reason = asyncio.run(_twilio_exchange(deployment, batch))
        outcomes[f"close {code}"] = outcomes.get(f"close {code}", 0) + 1
        assert not [m for m in received if m.get("type") == "error"], (received, batch)
        if code is not None:
            assert code in TWILIO_CLOSES and reason.startswith(TWILIO_CLOSES[code]), (code, reason, batch)

    fuzz()
    assert {"close 1007", "close 1008"} & set(outcomes), outcomes  # the fuzz reached the frame checks
    assert bystander.answers("hello"), bystander.received[-10:]
    assert not bystander.errors(), bystander.errors()


# --- AudioHook v2 --------------------------------------------------------------------------------
AUDIOHOOK_TYPES = ("open", "ping", "close", "pause", "resume", "dtmf", "update", "discarded", "error")


def _audiohook(client: AudioHookClient, kind: str, parameters, mangle: dict) -> str:
    """One of the client's messages, its envelope fields then mangled (any of them may be)."""
    return json.dumps({**client.envelope(kind, parameters if isinstance(parameters, dict) else {}), **mangle})


ENVELOPE_MANGLES = st.fixed_dictionaries(
    {},
    optional={
        "version": st.sampled_from(["2", "1", 2, None]),
        "seq": st.sampled_from([0, -1, 10**12, "1", None]) | ANY_JSON,
        "id": st.sampled_from(["not-the-session"]) | ANY_JSON,
        "parameters": ANY_JSON,
        "type": st.text(max_size=10) | ANY_JSON,
    },
)
AUDIOHOOK_STEP = st.one_of(
    st.tuples(st.sampled_from(AUDIOHOOK_TYPES), ANY_JSON, ENVELOPE_MANGLES),
    st.binary(max_size=400),  # audio frames of any length
    st.text(max_size=40),
)


async def _audiohook_exchange(
    deployment: Deployment, steps: list
) -> tuple[list[dict], int | None, list[str]]:
    session_id = str(uuid.uuid4())
    headers = {
        "Audiohook-Organization-Id": ORG,
        "Audiohook-Session-Id": session_id,
        "Audiohook-Correlation-Id": str(uuid.uuid4()),
        "X-API-KEY": CC_KEY,
    }
    violations: list[str] = []
    async with websockets.connect(
        f"{deployment.ws}/contactcenter/stream",
        subprotocols=["audiohook-v2"],
        additional_headers=headers,
        max_size=2**22,
        open_timeout=30,
    ) as ws:
        client = AudioHookClient(audiohook_socket(ws), session_id=session_id)
        await client.open(input_variables={"promptName": "banking"})
        try:
            for step in steps:
                if isinstance(step, tuple):
                    await client.send_raw(_audiohook(client, *step))
                elif isinstance(step, bytes):
                    await client.send_audio(step)
                else:
                    await client.send_raw(step)
                await asyncio.sleep(0.01)
            while await client.next_message(QUIET_S) is not None:
                pass
        except (ConnectionClosed, TimeoutError):
            pass
        except AssertionError as exc:  # the strict client found a protocol violation in the server's messages
            violations.append(str(exc)[:300])
        return client.messages, ws.close_code, violations


@pytest.mark.timeout(600)
def test_hostile_audiohook_messages_end_in_a_protocol_disconnect_and_touch_no_one_else(
    deployment: Deployment, bystander: Bystander
):
    reasons: dict[str, int] = {}

    @settings(FUZZ_SETTINGS, max_examples=50)
    @given(st.lists(AUDIOHOOK_STEP, min_size=1, max_size=6))
    def fuzz(steps: list) -> None:
        messages, code, violations = asyncio.run(_audiohook_exchange(deployment, steps))
        assert not violations, (violations, steps)
        for message in messages:
            if message["type"] == "disconnect":
                reason = message["parameters"].get("reason")
                reasons[reason] = reasons.get(reason, 0) + 1
                assert reason in ("completed", "error", "unauthorized"), message
                if reason == "error":
                    assert message["parameters"].get("info"), message
        assert code in (None, 1000), (code, messages[-3:], steps)

    fuzz()
    assert "error" in reasons, reasons  # the fuzz reached the protocol checks
    assert bystander.answers("hello"), bystander.received[-10:]
    assert not bystander.errors(), bystander.errors()
    bystander.close()
    assert_log_clean(deployment)
