"""A reply is written to the database when it is sent and corrected to what was heard: in the same
batch or a later one, a cut reply becomes the words heard, an unheard one goes, ``GET /sessions``
says how much was heard."""

from __future__ import annotations

import pytest

from agents_app import sessions
from voiceagent.conversation.session import Turn

pytestmark = pytest.mark.django_db


def sent(content: str, uid: str) -> Turn:
    return Turn(role="assistant", content=content, agent="front", heard="unknown", uid=uid)


def test_a_reply_written_when_sent_is_corrected_to_what_was_heard():
    sid = "heard-1"
    sessions.write_batch(
        [
            ("turn", sid, Turn(role="user", content="hello", agent="front"), "default", None),
            ("turn", sid, sent("Hello there, how are you today?", "a" * 32), "default", None),
            ("correct", sid, Turn(role="assistant", content="Hello there …", heard="cut", uid="a" * 32)),
        ]
    )
    sessions.write_batch([("turn", sid, sent("Still there?", "b" * 32), "default", None)])
    assert [(t["content"], t.get("heard")) for t in sessions.history(sid)] == [
        ("hello", None),
        ("Hello there …", "cut"),
        ("Still there?", "unknown"),  # the process died before it played: what the caller got
    ]
    sessions.write_batch(
        [
            ("correct", sid, Turn(role="assistant", content="Still there?", heard="played", uid="b" * 32)),
            ("turn", sid, sent("Never heard.", "c" * 32), "default", None),
            ("correct", sid, Turn(role="assistant", content="", uid="c" * 32)),
        ]
    )
    assert [(t["content"], t.get("heard")) for t in sessions.history(sid)] == [
        ("hello", None),
        ("Hello there …", "cut"),
        ("Still there?", "played"),
    ]


def test_the_session_api_says_how_much_of_a_reply_was_heard(api_client):
    sid = "heard-2"
    sessions.create_session(sid, "default", "front")
    sessions.write_batch([("turn", sid, sent("All of it.", "d" * 32), "default", None)])
    body = api_client.get(f"/api/v1/sessions/{sid}").json()
    assert [(t["content"], t["heard"]) for t in body["history"]] == [("All of it.", "unknown")]
