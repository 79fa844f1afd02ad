"""What a browser conversation writes to the log: barge-in only when something was interrupted.

Every typed ``text`` message used to log ``barge-in (text): response None stopped`` at INFO, the first
one on a socket because the greeting task had not begun yet, and a typed message that did interrupt
the agent was handled twice (two ``barge_in`` events). Now a barge-in is handled once and logged (at
DEBUG: at most one per turn, and the client is told by the ``barge_in`` event anyway) only when a
response or its audio was actually stopped.
"""

from __future__ import annotations

import logging
import re

import pytest
from test_browser_consumer import connect, is_event, msg, recv, until

from voiceagent.conversation.testing import ScriptedChat

pytestmark = pytest.mark.django_db(transaction=True)
LONG_REPLY = "Sure, " + "I can help with that, " * 20 + "today."  # ~2 s of audio: still playing


def barge_in_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "barge-in" in r.getMessage()]


def final_response(m: dict) -> bool:
    return m["type"] == "response" and m["payload"]["final"]


async def test_typed_text_logs_no_barge_in_unless_the_agent_was_interrupted(fake_runtime, caplog):
    fake_runtime.chat = ScriptedChat(default=LONG_REPLY)
    caplog.set_level(logging.DEBUG, logger="voiceagent.conversation")
    comm = await connect()
    await recv(comm)
    await comm.send_to(text_data=msg("text", text="hello there"))  # starts the conversation too
    # the greeting first (never cut by the line that started it), then the answer
    await until(comm, lambda m: final_response(m) and m["payload"]["text"] == LONG_REPLY)
    assert barge_in_records(caplog) == [], [r.getMessage() for r in barge_in_records(caplog)]

    # typed while the reply is still playing: that is a barge-in, told once and logged once, below INFO
    await comm.send_to(text_data=msg("text", text="actually wait"))
    seen = await until(comm, final_response)
    assert sum(1 for m in seen if is_event("barge_in")(m)) == 1, [m["type"] for m in seen]
    records = barge_in_records(caplog)
    assert [r.levelname for r in records] == ["DEBUG"], [r.getMessage() for r in records]
    assert re.fullmatch(r"barge-in \(text\): response \d+ stopped, audio stopped", records[0].getMessage())
    await comm.disconnect()
