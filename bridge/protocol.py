"""AudioHook v2, sans I/O: message parsing and checking, sequence numbers, media negotiation.

The consumer (:mod:`bridge.consumer`) owns the socket and the conversation; this module owns the
protocol's rules (``protocols/audiohook-v2.md``), so they can be tested without a socket:

- every text message is ``{"version": "2", "id", "type", "seq", "parameters", ...}``; the client
  numbers its messages 1, 2, 3 ... without gaps and acknowledges ours with ``serverseq``;
- a client seq that is not last + 1, a ``serverseq`` above what we sent, an ``id`` that is not the
  session's, a message over 65 535 characters or one that is not such an object is a protocol
  error: :class:`ProtocolError` carries the ``info`` for the ``disconnect`` the consumer sends;
- server messages are numbered here (:meth:`AudioHookSession.message`) with ``clientseq`` = the
  last client seq processed;
- the bridge takes mu-law (``PCMU``) at 8 kHz on the ``external`` (customer) channel and nothing
  else (:func:`select_media`); the monitor takes both channels when offered, else either one
  (:func:`select_monitor_media`), and splits the interleaved frames (:func:`demux`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CLIENT_TYPES",
    "MAX_TEXT",
    "NULL_UUID",
    "AudioHookSession",
    "ClientMessage",
    "ProtocolError",
    "demux",
    "is_probe",
    "lenient_close",
    "parse_duration",
    "select_media",
    "select_monitor_media",
]

VERSION = "2"
MAX_TEXT = 65535
NULL_UUID = "00000000-0000-0000-0000-000000000000"
CLIENT_TYPES = frozenset(
    {
        "open",
        "ping",
        "update",
        "paused",
        "resumed",
        "discarded",
        "dtmf",
        "playback_started",
        "playback_completed",
        "close",
        "error",
    }
)
_UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_DURATION_RE = re.compile(r"^PT(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?$")


class ProtocolError(Exception):
    """The client broke the protocol; ``info`` goes into the ``disconnect`` (reason ``error``)."""

    def __init__(self, info: str, reason: str = "error"):
        super().__init__(info)
        self.info = info
        self.reason = reason


@dataclass(frozen=True)
class ClientMessage:
    type: str
    seq: int
    parameters: dict[str, Any] = field(default_factory=dict)
    position: str | None = None


def lenient_close(text: str) -> ClientMessage | None:
    """A ``close`` judged only by its type: after a protocol error the two sides' seq counts differ,
    and the session must still end with ``closed`` rather than a timeout."""
    if len(text) > MAX_TEXT:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("type") != "close":
        return None
    parameters = data.get("parameters")
    return ClientMessage("close", 0, parameters if isinstance(parameters, dict) else {})


def is_uuid(value: Any) -> bool:
    return isinstance(value, str) and bool(_UUID_RE.match(value))


def parse_duration(value: Any) -> float | None:
    """ISO-8601 duration as AudioHook writes it (``PT1.2S``, ``PT2M3S``) in seconds; None if not one."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    match = _DURATION_RE.match(value)
    if match is None or value == "PT":
        return None
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def select_media(offered: Any) -> dict[str, Any] | None:
    """The offered entry the bridge takes, verbatim: PCMU at 8000 Hz with the external channel.

    A mono ``["external"]`` entry is preferred over a stereo one that includes it (half the bytes).
    None when nothing offered qualifies (the session must not start).
    """
    if not isinstance(offered, list):
        return None
    best: dict[str, Any] | None = None
    for entry in offered[:16]:
        channels = _pcmu_8k(entry)
        if channels is not None and "external" in channels:
            if channels == ["external"]:
                return entry
            best = best or entry
    return best


def _pcmu_8k(entry: Any) -> list[str] | None:
    """The channels of an offered PCMU 8 kHz audio entry, else None."""
    if not isinstance(entry, dict):
        return None
    channels = entry.get("channels")
    if (
        entry.get("type") == "audio"
        and entry.get("format") == "PCMU"
        and entry.get("rate") == 8000
        and isinstance(channels, list)
        and 0 < len(channels) <= 8
        and all(isinstance(c, str) for c in channels)
    ):
        return channels
    return None


def select_monitor_media(offered: Any) -> dict[str, Any] | None:
    """The offered entry the monitor takes, verbatim: PCMU at 8000 Hz, preferably with both the
    ``external`` (customer) and ``internal`` (the contact centre's person) channels, so both sides
    are heard; else a mono ``["external"]`` or ``["internal"]``. None when nothing qualifies."""
    if not isinstance(offered, list):
        return None
    mono: dict[str, Any] | None = None
    for entry in offered[:16]:
        channels = _pcmu_8k(entry)
        if channels is None:
            continue
        if "external" in channels and "internal" in channels:
            return entry
        if mono is None and channels in (["external"], ["internal"]):
            mono = entry
    return mono


def demux(data: bytes, channels: list[str] | tuple[str, ...]) -> dict[str, bytes]:
    """An interleaved binary frame (one byte per sample per channel, in the selected ``channels``
    order) split per channel name; a trailing partial sample frame is dropped."""
    count = len(channels)
    if count == 1:
        return {channels[0]: data}
    usable = len(data) - len(data) % count
    return {name: data[i:usable:count] for i, name in enumerate(channels)}


def is_probe(parameters: dict[str, Any]) -> bool:
    """The connection probe: a session for the null conversation, to be opened and closed, nothing more."""
    participant = parameters.get("participant")
    participant_id = participant.get("id") if isinstance(participant, dict) else None
    return parameters.get("conversationId") == NULL_UUID and participant_id in (None, NULL_UUID)


class AudioHookSession:
    """One AudioHook session's protocol state: ids, both sequence counters, the phase."""

    def __init__(self, session_id: str | None = None, organization_id: str | None = None):
        self.id = session_id if is_uuid(session_id) else None  # the Audiohook-Session-Id header
        self.organization_id = organization_id
        self.client_seq = 0
        self.server_seq = 0
        self.open_received = False
        self.media: dict[str, Any] | None = None

    # --- inbound ------------------------------------------------------------------------------------
    def parse(self, text: str) -> ClientMessage:
        """Check one client text message against the protocol; the seq counter advances on success."""
        if len(text) > MAX_TEXT:
            raise ProtocolError(f"text message of {len(text)} characters exceeds {MAX_TEXT}")
        try:
            data = json.loads(text)
        except ValueError:
            raise ProtocolError("message is not JSON") from None
        if not isinstance(data, dict):
            raise ProtocolError("message is not a JSON object")
        if data.get("version") != VERSION:
            raise ProtocolError(f"unsupported protocol version {str(data.get('version'))[:20]!r}")
        kind = data.get("type")
        if not isinstance(kind, str) or not kind:
            raise ProtocolError("message has no type")
        seq = data.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool):
            raise ProtocolError("message has no integer seq")
        if seq != self.client_seq + 1:
            what = "duplicate" if seq <= self.client_seq else "out-of-order"
            raise ProtocolError(f"{what} seq {seq}: expected {self.client_seq + 1}")
        serverseq = data.get("serverseq", 0)
        if (
            not isinstance(serverseq, int)
            or isinstance(serverseq, bool)
            or not 0 <= serverseq <= self.server_seq
        ):
            raise ProtocolError(f"serverseq {str(serverseq)[:20]} does not match the {self.server_seq} sent")
        message_id = data.get("id")
        if self.id is None and kind == "open" and is_uuid(message_id):
            self.id = message_id  # no Audiohook-Session-Id header: the open names the session
        if message_id != self.id:
            raise ProtocolError("session id mismatch")
        parameters = data.get("parameters", {})
        if not isinstance(parameters, dict):
            raise ProtocolError("parameters is not an object")
        if kind == "open" and self.open_received:
            raise ProtocolError("open received twice")
        if kind != "open" and not self.open_received and kind in CLIENT_TYPES - {"error", "close"}:
            raise ProtocolError(f"{kind} before open")
        position = data.get("position")
        self.client_seq = seq
        if kind == "open":
            self.open_received = True
        return ClientMessage(kind, seq, parameters, position if isinstance(position, str) else None)

    def check_open(self, parameters: dict[str, Any]) -> None:
        """What an ``open`` must hold besides media: the organization of the request headers."""
        org = parameters.get("organizationId")
        if self.organization_id and org != self.organization_id:
            raise ProtocolError(
                "organizationId does not match the Audiohook-Organization-Id header", "unauthorized"
            )
        if not is_uuid(parameters.get("conversationId")):
            raise ProtocolError("open has no conversationId")

    # --- outbound -----------------------------------------------------------------------------------
    def message(self, kind: str, parameters: dict[str, Any] | None = None) -> str:
        """The next server message as JSON text (numbered; acknowledges the last client seq)."""
        self.server_seq += 1
        return json.dumps(
            {
                "version": VERSION,
                "id": self.id or NULL_UUID,
                "type": kind,
                "seq": self.server_seq,
                "clientseq": self.client_seq,
                "parameters": parameters or {},
            },
            separators=(",", ":"),
        )
