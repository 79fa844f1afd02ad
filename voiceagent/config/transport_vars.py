"""Declarations of the transports' variables: phone calls (ACS media streams) and the browser and
dashboard sockets. Each group keeps its README order."""

from __future__ import annotations

from .parsing import Var, choice, integer, number, string, url

V = Var  # short: the table reads one declaration per call

TELEPHONY: tuple[Var, ...] = (
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
        "k times the rate is closed within about this / (k - 1) seconds",
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
