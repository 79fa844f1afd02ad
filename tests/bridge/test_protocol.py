"""AudioHook v2 rules without a socket: sequence numbers, ids, sizes, media negotiation, durations."""

from __future__ import annotations

import json
import uuid

import pytest
from audiohook_client import MONO, NULL_UUID, STEREO

from bridge.protocol import (
    MAX_TEXT,
    AudioHookSession,
    ProtocolError,
    is_probe,
    parse_duration,
    select_media,
)

SID = "41a24f29-532e-44d0-973d-2debcb693e82"  # fixed: test ids must not change between collections (xdist)


def msg(kind: str, seq: int, parameters=None, **extra) -> str:
    body = {
        "version": "2",
        "id": SID,
        "type": kind,
        "seq": seq,
        "serverseq": 0,
        "parameters": parameters or {},
    }
    body.update(extra)
    return json.dumps(body)


def opened_session() -> AudioHookSession:
    session = AudioHookSession(SID, "org")
    session.parse(msg("open", 1, {"organizationId": "org"}))
    return session


def test_client_messages_count_from_one_without_gaps():
    session = opened_session()
    assert session.parse(msg("ping", 2)).type == "ping"
    assert session.parse(msg("dtmf", 3, {"digit": "5"})).parameters == {"digit": "5"}
    assert session.client_seq == 3


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (msg("ping", 2), "duplicate seq 2"),
        (msg("ping", 4), "out-of-order seq 4: expected 3"),
        (msg("ping", "3"), "no integer seq"),
        (msg("ping", True), "no integer seq"),
        (msg("ping", 3, id="0f3c9a8e-5b1d-4e2a-9c7f-3a6b8d2e1f40"), "session id mismatch"),
        (msg("ping", 3, serverseq=9), "serverseq 9"),
        (msg("ping", 3, serverseq=-1), "serverseq -1"),
        (msg("ping", 3, version="1"), "unsupported protocol version"),
        (msg("ping", 3, parameters=[1]), "parameters is not an object"),
        (msg("open", 3), "open received twice"),
        ("not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        (json.dumps({"version": "2", "id": SID, "seq": 3}), "no type"),
        ("x" * (MAX_TEXT + 1), "exceeds 65535"),
    ],
)
def test_protocol_errors_name_what_was_wrong(text, needle):
    session = opened_session()
    session.parse(msg("ping", 2))
    with pytest.raises(ProtocolError) as info:
        session.parse(text)
    assert needle in info.value.info and info.value.reason == "error"
    assert session.client_seq == 2  # a rejected message does not count


def test_nothing_but_open_comes_first():
    session = AudioHookSession(SID)
    with pytest.raises(ProtocolError, match="ping before open"):
        session.parse(msg("ping", 1))


def test_without_a_session_header_the_open_names_the_session():
    session = AudioHookSession(None)
    session.parse(msg("open", 1))
    assert session.id == SID
    with pytest.raises(ProtocolError, match="mismatch"):
        session.parse(msg("ping", 2, id=str(uuid.uuid4())))


def test_open_must_come_from_the_header_organization():
    session = AudioHookSession(SID, "org-a")
    with pytest.raises(ProtocolError) as info:
        session.check_open({"organizationId": "org-b", "conversationId": str(uuid.uuid4())})
    assert info.value.reason == "unauthorized"
    with pytest.raises(ProtocolError, match="no conversationId"):
        session.check_open({"organizationId": "org-a", "conversationId": "nope"})
    session.check_open({"organizationId": "org-a", "conversationId": str(uuid.uuid4())})


def test_server_messages_are_numbered_and_acknowledge_the_client():
    session = opened_session()
    session.parse(msg("ping", 2))
    first, second = (
        json.loads(session.message("opened", {"media": [MONO]})),
        json.loads(session.message("pong")),
    )
    assert first == {
        "version": "2",
        "id": SID,
        "type": "opened",
        "seq": 1,
        "clientseq": 2,
        "parameters": {"media": [MONO]},
    }
    assert second["seq"] == 2 and second["parameters"] == {}
    session.parse(msg("ping", 3, serverseq=2))  # acknowledging both is fine


def test_media_selection_takes_pcmu_8k_with_the_external_channel_verbatim():
    internal = {**MONO, "channels": ["internal"]}
    assert select_media([STEREO, MONO]) is MONO  # mono preferred
    assert select_media([internal, STEREO]) is STEREO
    assert select_media([{**MONO, "format": "L16"}, {**MONO, "rate": 16000}, internal]) is None
    assert select_media([]) is None and select_media("PCMU") is None and select_media([1, None, "x"]) is None
    assert select_media([{**MONO, "channels": "external"}]) is None


def test_the_connection_probe_is_recognised():
    assert is_probe({"conversationId": NULL_UUID, "participant": {"id": NULL_UUID}})
    assert not is_probe({"conversationId": str(uuid.uuid4()), "participant": {"id": NULL_UUID}})
    assert not is_probe({"conversationId": NULL_UUID, "participant": {"id": str(uuid.uuid4())}})


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("PT1.2S", 1.2),
        ("PT0S", 0.0),
        ("PT2M3S", 123.0),
        ("PT1H", 3600.0),
        ("PT", None),
        ("1.2", None),
        (5, None),
    ],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds
