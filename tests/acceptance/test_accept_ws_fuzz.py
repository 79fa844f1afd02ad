"""Acceptance: hostile input on the browser conversation socket, generated (Hypothesis), against the
real server - the WebSocket counterpart of ``test_accept_openapi.py``.

Each example is a connection sending a batch of messages: envelopes of every client type (and of
none) with payloads of any JSON shape, JSON that is not an envelope, text that is not JSON, and
binary frames of odd lengths. What must hold for every one of them (docs/api.md): each bad message
gets an ``error`` with a documented code and the socket stays open, or the socket closes with a
documented code and reason; never ``internal`` or 1011 (a server-side failure). A conversation of
another caller, open the whole time, answers as before, and the server logs no error.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets
from deployments import SHARED_ENV, Deployment, assert_log_clean
from hostile import ANY_JSON, FUZZ_SETTINGS, LEAF, Bystander
from hypothesis import example, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed

pytestmark = [pytest.mark.acceptance, pytest.mark.slow]

SERVER_ENV = SHARED_ENV  # BROWSER_MAX_MESSAGE_BYTES 4096, REPROMPT_AFTER_S 0 (a silent bystander)
DOCUMENTED_ERRORS = {  # docs/api.md, browser conversation: error codes a client may meet
    *("bad_json", "bad_message", "unknown_type", "bad_audio", "bad_sample_rate", "bad_text", "bad_dtmf"),
    *("bad_control", "bad_config", "unknown_scenario", "not_started", "start_failed", "store_unavailable"),
    *("stt_error", "tts_error", "llm_error", "input_overflow", "tool_rounds_exceeded"),
    *("realtime_unavailable", "realtime_error", "realtime_dropped"),
}
DOCUMENTED_CLOSES = {1000, 1007, 1008, 1009}  # 1011 would be a failure of ours
# After each batch, a message of a type of its own: its ``unknown_type`` answer (messages are answered
# in order) says the batch was answered; waiting for quiet instead cost 1 s an example (0.3 s
# missed answers on a loaded machine).
END = json.dumps({"type": "end-of-batch", "payload": {}})
END_WAIT_S = 20.0  # the end's answer, on a loaded machine

NEAR_VALID = {  # values close to valid ones, so that the fuzz reaches past the first checks
    "sample_rate": st.sampled_from([0, 8000, 16000, 44100, -1, 2**40, "16000", 16000.5]),
    "output_sample_rate": st.sampled_from([0, 16000, 24000, 7, "24000"]),
    "action": st.sampled_from(["start", "stop", "pause", "resume", "reset", "explode", ""]),
    "mode": st.sampled_from(["cascade", "live", "turbo", ""]),
    "scenario": st.sampled_from(["default", "banking", "nope", "", "../etc", "x" * 300]),
    "agent": st.sampled_from(["assistant", "concierge", "ghost", ""]),
    "text": st.sampled_from(["hi", "", " ", "x" * 2001, "\u0000", "what time is it"]) | st.text(max_size=80),
    "digits": st.text(alphabet="0123456789*#ABCDxyz ", max_size=40),
    "data": st.sampled_from(["", "AAAA", "not base64!", "AA=", "A" * 3000]),
    "overrides": st.dictionaries(
        st.sampled_from(["voice", "temperature", "top_p", "max_tokens", "model", "bogus"]), LEAF, max_size=3
    ),
}
FIELDS = {  # the payload keys of each client message type (docs/api.md)
    "audio_data": ("data", "sample_rate"),
    "config": ("scenario", "agent", "sample_rate", "output_sample_rate", "overrides", "mode"),
    "control": ("action",),
    "text": ("text",),
    "dtmf": ("digits",),
}


def _payload(kind: str) -> st.SearchStrategy:
    """A payload of ``kind``'s own keys with near-valid or any values, now and then another key."""
    keys = FIELDS[kind]
    shaped = st.fixed_dictionaries({}, optional={k: NEAR_VALID[k] | ANY_JSON for k in keys})
    return shaped | st.dictionaries(st.sampled_from([*keys, "extra"]), ANY_JSON, max_size=3)


def _envelope(kind: str, payload) -> str:
    return json.dumps({"type": kind, "payload": payload})


SHAPED = st.one_of(*(_payload(kind).map(lambda p, k=kind: _envelope(k, p)) for kind in FIELDS))
ODD = st.builds(_envelope, st.sampled_from(["", "audio", "TEXT"]) | st.text(max_size=12), ANY_JSON)
MESSAGE = st.one_of(
    SHAPED, SHAPED, SHAPED, ODD, ANY_JSON.map(json.dumps), st.text(max_size=60), st.binary(max_size=64)
)
OVERSIZED = json.dumps({"type": "text", "payload": {"text": "x" * 5000}})  # over BROWSER_MAX_MESSAGE_BYTES
BATCH = st.tuples(st.lists(MESSAGE, min_size=1, max_size=6), st.sampled_from([False] * 9 + [True])).map(
    lambda drawn: drawn[0] + [OVERSIZED] * drawn[1]  # about one batch in ten ends with one
)


async def _exchange(url: str, batch: list[str | bytes]) -> tuple[list[dict], int | None, str]:
    """Send ``batch`` on a new socket; (messages received, close code or None, close reason)."""
    received: list[dict] = []
    async with websockets.connect(url, max_queue=None, open_timeout=30) as ws:
        try:
            for message in [*batch, END]:
                await ws.send(message)
                await asyncio.sleep(0.01)  # a client within the rate limit
            async with asyncio.timeout(END_WAIT_S):
                while True:
                    raw = await ws.recv()
                    if isinstance(raw, str):
                        message = json.loads(raw)
                        if "end-of-batch" in str(message.get("payload", {}).get("message", "")):
                            break
                        received.append(message)
        except (ConnectionClosed, TimeoutError):
            pass
        code = ws.close_code
        reason = ws.close_reason or ""
    return received, code, reason


def test_hostile_messages_are_answered_as_documented_and_touch_no_one_else(
    deployment: Deployment, bystander: Bystander
):
    url = f"{deployment.ws}/browser/conversation?api_key={deployment.api_key}"
    assert bystander.answers("hello"), bystander.received
    seen: dict[str, int] = {}

    @settings(FUZZ_SETTINGS, max_examples=80)
    @given(BATCH)
    # one of each check the coverage below asks for, whatever the generated batches reach
    @example(['{"type": "nope", "payload": {}}', "{not json", '{"type": "text", "payload": {"text": 5}}'])
    @example(['{"type": "config", "payload": {"mode": "turbo"}}', '{"type": "control", "payload": {}}'])
    def fuzz(batch: list[str | bytes]) -> None:
        received, code, reason = asyncio.run(_exchange(url, batch))
        errors = [m["payload"].get("code") for m in received if m.get("type") == "error"]
        for outcome in [*errors, f"close {code}"]:
            seen[outcome] = seen.get(outcome, 0) + 1
        assert set(errors) <= DOCUMENTED_ERRORS, (errors, batch)
        if code is not None and code != 1000:
            assert code in DOCUMENTED_CLOSES and reason, (code, reason, batch)

    fuzz()
    # the fuzz reached past the envelope into each type's own checks
    assert {"bad_json", "unknown_type", "bad_text", "bad_config", "bad_control"} <= set(seen), seen
    assert bystander.answers("hello again"), bystander.received[-10:]
    assert not bystander.errors(), bystander.errors()
    bystander.close()
    assert_log_clean(deployment)
