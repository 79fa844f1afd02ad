"""Declarations of the transports' variables: phone calls (ACS or Twilio media streams) and the browser and
dashboard sockets. Each group keeps its README order."""

from __future__ import annotations

import re

from .parsing import Var, choice, integer, number, string, url

_TWILIO_SID = re.compile(r"AC[0-9a-f]{32}\Z")
_E164 = re.compile(r"\+[0-9]{8,15}\Z")
_SCENARIO = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")


def twilio_sid(raw: str) -> str:
    value = raw.strip()
    if not _TWILIO_SID.match(value):
        raise ValueError("accepts a Twilio account SID: AC followed by 32 lower-case hex digits")
    return value


def number_scenarios(raw: str) -> dict[str, str]:
    """``+15551230000=banking,+15551230001=default`` -> {number: scenario}."""
    pairs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        number, sep, scenario = (x.strip() for x in item.partition("="))
        if not sep or not _E164.match(number) or not _SCENARIO.match(scenario):
            raise ValueError("accepts comma-separated +E.164=scenario pairs, e.g. +15551230000=banking")
        pairs[number] = scenario
    return pairs


def e164(raw: str) -> str:
    value = raw.strip()
    if not _E164.match(value):
        raise ValueError("accepts a +E.164 phone number: + followed by 8-15 digits")
    return value


V = Var  # short: the table reads one declaration per call

TELEPHONY: tuple[Var, ...] = (
    V(
        "TELEPHONY_PROVIDER",
        "auto",
        choice("auto", "acs", "twilio"),
        "Which provider places outbound calls (`acs` or `twilio`); `auto` picks acs when "
        "TELEPHONY_ENDPOINT is set, else twilio when TWILIO_ACCOUNT_SID is. Inbound calls are answered "
        "on every configured provider",
        group="telephony",
    ),
    V(
        "TELEPHONY_STREAMING_MODE",
        "MEDIA",
        choice("MEDIA", "TRANSCRIPTION", "VOICE_LIVE", upper=True),
        "Orchestration mode of phone calls",
        group="telephony",
    ),
    V(
        "BASE_URL",
        None,
        url("https", "http"),
        "Public URL the telephony provider calls back (callbacks and media stream are built from it)",
        group="telephony",
    ),
    V(
        "TELEPHONY_ENDPOINT",
        None,
        url("https", "http"),
        "Telephony provider (ACS) endpoint",
        group="telephony",
    ),
    V(
        "TELEPHONY_ACCESS_KEY",
        None,
        string,
        "Telephony provider access key (else managed identity)",
        secret=True,
        group="telephony",
    ),
    V("TELEPHONY_PHONE_NUMBER", None, string, "Caller id for outbound calls (+E.164)", group="telephony"),
    V(
        "TELEPHONY_MEDIA_AUDIENCE",
        None,
        string,
        "When set, the media stream's bearer JWT must carry this audience (the ACS resource id)",
        group="telephony",
    ),
    V(
        "TELEPHONY_MEDIA_JWKS_URL",
        "https://acscallautomation.communication.azure.com/calling/keys",
        url("https", "http"),
        "Signing keys (JWKS) that verify the media stream's bearer JWT when TELEPHONY_MEDIA_AUDIENCE is set",
        group="telephony",
    ),
    V(
        "TWILIO_ACCOUNT_SID",
        None,
        twilio_sid,
        "Twilio account SID (AC + 32 hex digits): Twilio places and answers calls",
        group="telephony",
    ),
    V(
        "TWILIO_AUTH_TOKEN",
        None,
        string,
        "Twilio auth token: signs our REST calls and verifies X-Twilio-Signature on its webhooks and "
        "Media Streams",
        secret=True,
        group="telephony",
    ),
    V("TWILIO_PHONE_NUMBER", None, e164, "Twilio caller id for outbound calls (+E.164)", group="telephony"),
    V(
        "TWILIO_NUMBER_SCENARIOS",
        None,
        number_scenarios,
        "Scenario of inbound Twilio calls by the number called: comma-separated +E.164=scenario pairs "
        "(other numbers, or an unknown scenario: `default`)",
        group="telephony",
    ),
    V(
        "TWILIO_API_BASE",
        "https://api.twilio.com",
        url("https", "http"),
        "Twilio REST API base URL (tests point it at a local peer)",
        group="telephony",
    ),
    V(
        "TELEPHONY_MAX_STREAMS",
        "200",
        integer(1, 10000),
        "Concurrent phone media streams per process; more are refused with close code 1013",
        group="telephony",
    ),
    V(
        "TELEPHONY_MAX_MESSAGE_BYTES",
        "262144",
        integer(1024, 16 * 1024 * 1024),
        "Largest media stream message accepted; larger ones close the stream with 1009",
        group="telephony",
    ),
    V(
        "TELEPHONY_MAX_MESSAGES_PER_SECOND",
        "200",
        integer(1, 10000),
        "Messages per second per media stream (the provider sends 50 audio frames a second; token bucket, "
        "see WEBSOCKET_RATE_BURST_S); more close it with 1008",
        group="telephony",
    ),
)

BROWSER: tuple[Var, ...] = (
    V(
        "BROWSER_MAX_CONNECTIONS",
        "200",
        integer(1, 100000),
        "Concurrent browser conversations per process; more are refused with close code 1013",
        group="browser",
    ),
    V(
        "BROWSER_MAX_MESSAGE_BYTES",
        "262144",
        integer(1024, 16 * 1024 * 1024),
        "Largest WebSocket message accepted; larger ones close the socket with 1009",
        group="browser",
    ),
    V(
        "BROWSER_MAX_MESSAGES_PER_SECOND",
        "100",
        integer(1, 10000),
        "Sustained messages per second per browser socket; a client sending faster is closed with 1008 "
        "(a token bucket, see WEBSOCKET_RATE_BURST_S)",
        group="browser",
    ),
    V(
        "WEBSOCKET_RATE_BURST_S",
        "5",
        number(1, 60),
        "Seconds of its message rate a browser, dashboard or media socket may send at once. The limiter "
        "counts messages when the server reads them, not when they arrive, so after the server fell behind "
        "(a stall, a busy moment) it reads a backlog at once; a bucket of this many seconds absorbs a "
        "backlog that old: a client within the rate is never closed for the server's delay, a flood at "
        "k times the rate is closed within about this / (k - 1) seconds. What queued while the server "
        "handled one of the socket's messages for longer than 250 ms (a conversation's start under load) is "
        "excused on top",
        group="browser",
    ),
    V(
        "DASHBOARD_MAX_CONNECTIONS",
        "50",
        integer(1, 100000),
        "Concurrent dashboard relay sockets per process; more are refused with close code 1013",
        group="browser",
    ),
    V(
        "DASHBOARD_MAX_MESSAGE_BYTES",
        "4096",
        integer(128, 1024 * 1024),
        "Largest message a dashboard may send (the relay only sends; anything is answered with an error); "
        "larger ones close the socket with 1009",
        group="browser",
    ),
    V(
        "DASHBOARD_MAX_MESSAGES_PER_SECOND",
        "5",
        integer(1, 10000),
        "Messages per second a dashboard may send (token bucket, see WEBSOCKET_RATE_BURST_S); "
        "more close it with 1008",
        group="browser",
    ),
    V(
        "BROWSER_LEVELS_PER_SECOND",
        "10",
        integer(0, 20),
        "audio_levels messages per second per browser socket at most (0: none); a level that has not "
        "changed is not sent again",
        group="browser",
    ),
    V(
        "BROWSER_IDLE_TIMEOUT_S",
        "300",
        number(5, 86400),
        "A browser conversation with no message for this long ends cleanly",
        group="browser",
    ),
)
