"""An answer the caller heard is in the history once, even when the next turn starts while the
response task is still finishing (saving the session state) after its audio was committed."""

from __future__ import annotations

import asyncio

from enginekit import Harness


async def test_an_answer_committed_before_the_next_turn_is_not_committed_again():
    async with Harness(script=["The answer."], texts=["a question", "next"]) as h:
        await h.idle()
        store = h.store
        saved = store.save
        slow = asyncio.Event()

        async def slow_save(state):  # the response task's last step: the state save, held open
            if slow.is_set():
                await asyncio.sleep(0.5)
            await saved(state)

        store.save = slow_save
        slow.set()
        h.speak()
        # the answer has played and is in the history (written when sent, then marked played),
        # while its task still saves the state
        await h.until(
            lambda h: any(t.content == "The answer." and t.heard == "played" for t in store.turns["s1"])
        )
        assert not h.conv._response_task.done()
        slow.clear()
        h.speak()  # the next turn starts now: a "new turn" barge-in finds the task still running
        await asyncio.sleep(0.01)
        await h.idle()
    answers = [t.content for t in store.turns["s1"] if t.role == "assistant"]
    assert answers.count("The answer.") == 1, answers
    assert h.of("StopAudio") == []  # it had played in full: there was nothing to stop
