"""A store that fails (the session cache or the database down) never ends a conversation nor loses
a turn from it (issue 12, point 1): the engine logs and goes on; what the store accepts afterwards
is complete."""

from __future__ import annotations

import logging

from enginekit import Harness

from voiceagent.conversation.session import InMemorySessionStore


class FlakyStore(InMemorySessionStore):
    """The in-memory store behind a switch: while ``down``, every write raises as a store whose
    server went away does (a connection error)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.refused = 0

    def _check(self) -> None:
        if self.down:
            self.refused += 1
            raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    async def save(self, state):
        self._check()
        await super().save(state)

    async def append_turn(self, state, turn):
        self._check()
        await super().append_turn(state, turn)

    async def record_handoff(self, state, event):
        self._check()
        await super().record_handoff(state, event)


async def test_turns_and_a_handoff_go_on_while_the_store_is_down(caplog):
    caplog.set_level(logging.WARNING, "voiceagent.conversation")
    h = Harness(script=["First answer.", [("to_billing", {})], "Billing answer."])
    h.conv.store = h.store = FlakyStore()
    async with h:
        await h.idle()
        h.store.down = True
        await h.conv.push_text("first question")
        await h.idle()
        await h.conv.push_text("put me through to billing")
        await h.idle()
        assert not h.conv.closed
        h.store.down = False
        await h.conv.push_text("and now?")
        await h.idle()
    kinds = h.kinds()
    # every turn typed during the outage was answered and the conversation came back to listening
    for asked, answers in [
        ("first question", ["AgentResponse(front:First answer.)"]),
        (
            "put me through to billing",
            ["Handoff(front->billing:announced)", "AgentResponse(billing:Billing here.)"],
        ),
        ("and now?", ["AgentResponse(billing:Billing answer.)"]),
    ]:
        start = kinds.index(f"Transcript(final:{asked})")
        end = kinds.index("State(listening)", start)
        assert all(answer in kinds[start:end] for answer in answers), kinds[start : end + 1]
    assert kinds[-1] == "State(ended)"
    assert h.store.refused > 0
    # the conversation's memory holds every turn, the store what came after the outage
    assert [t.content for t in h.conv.history if t.role == "user"] == [
        "first question",
        "put me through to billing",
        "and now?",
    ]
    assert [t.content for t in h.store.turns["s1"] if t.role == "user"] == ["and now?"]
    assert h.store.states["s1"].active_agent == "billing"  # the state saved after the outage is current
    failures = [r.getMessage() for r in caplog.records if "the conversation goes on" in r.getMessage()]
    assert failures and all("s1" in line and "ConnectionError" in line for line in failures)
