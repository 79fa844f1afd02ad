"""Lifecycle state machine: order, deferred steps, failure isolation, bounded cancellation."""

from __future__ import annotations

import asyncio
import logging

import pytest

from voiceagent.lifecycle import STEPS, Lifecycle, LifespanApp


def recording_cycle(events: list, **kwargs) -> Lifecycle:
    cycle = Lifecycle(**kwargs)
    for step in STEPS:

        async def start(name=step.name):
            events.append(("start", name))

        async def stop(name=step.name):
            events.append(("stop", name))

        cycle.register(step.name, "rec", start=start, stop=stop if step.blocking else None)
    return cycle


async def wait_deferred(cycle: Lifecycle) -> None:
    for _ in range(200):
        if cycle.deferred_startup_complete:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("deferred steps did not finish")


def test_step_table_matches_spec():
    assert [(s.number, s.name, s.blocking) for s in STEPS] == [
        (1, "core", True),
        (2, "speech", True),
        (3, "aoai", True),
        (4, "services", True),
        (5, "agents", True),
        (6, "events", True),
        (7, "warmup", False),
        (8, "mcp", False),
    ]


async def test_startup_order_and_shutdown_reverse_order():
    events: list = []
    cycle = recording_cycle(events)
    await cycle.startup()
    assert cycle.accepting
    await wait_deferred(cycle)
    starts = [name for kind, name in events if kind == "start"]
    assert starts[:6] == ["core", "speech", "aoai", "services", "agents", "events"]
    assert set(starts[6:]) == {"warmup", "mcp"}
    events.clear()
    report = await cycle.shutdown()
    assert [name for _, name in events] == ["events", "agents", "services", "aoai", "speech", "core"]
    assert report["cleanup_order"] == ["events", "agents", "services", "aoai", "speech", "core"]
    assert cycle.phase == "stopped"


async def test_requests_wait_for_blocking_steps_but_not_for_deferred():
    gate = asyncio.Event()
    cycle = Lifecycle()
    cycle.register("agents", "slow", start=gate.wait)
    cycle.register("warmup", "forever", start=asyncio.Event().wait)
    served = []

    async def app(scope, receive, send):
        served.append(scope["type"])

    wrapped = LifespanApp(app, cycle)
    request = asyncio.create_task(wrapped({"type": "http"}, None, None))
    await asyncio.sleep(0.05)
    assert served == [] and cycle.phase == "starting"
    gate.set()
    await asyncio.wait_for(request, 1)
    assert served == ["http"]
    assert not cycle.warmup_completed and not cycle.deferred_startup_complete
    await cycle.shutdown()


async def test_failing_step_is_logged_by_name_and_startup_continues(caplog):
    events: list = []
    cycle = recording_cycle(events)

    async def boom():
        raise RuntimeError("speech region unreachable")

    cycle.register("speech", "azure-tts", start=boom)
    with caplog.at_level(logging.INFO, logger="voiceagent.lifecycle"):
        await cycle.startup()
    assert cycle.accepting
    assert cycle.results["speech"].status == "failed"
    assert "azure-tts" in cycle.results["speech"].errors
    assert any(
        "step 2 speech" in r.getMessage() and "azure-tts" in r.getMessage() and r.levelname == "ERROR"
        for r in caplog.records
    )
    assert ("start", "events") in events
    await cycle.shutdown()


async def test_every_step_is_timed_and_logged(caplog):
    cycle = Lifecycle()
    cycle.register("core", "x", start=lambda: None)
    with caplog.at_level(logging.INFO, logger="voiceagent.lifecycle"):
        await cycle.startup()
        await wait_deferred(cycle)
    messages = [r.getMessage() for r in caplog.records]
    for step in STEPS:
        assert any(m.startswith(f"step {step.number} {step.name}:") for m in messages), step.name
    assert any("nothing to do" in m for m in messages)
    assert cycle.results["core"].duration_ms is not None
    await cycle.shutdown()


async def test_one_failing_cleanup_does_not_stop_the_others(caplog):
    events: list = []
    cycle = recording_cycle(events)

    async def bad():
        raise OSError("pool socket already closed")

    cycle.register("services", "store", stop=bad)
    await cycle.startup()
    events.clear()
    with caplog.at_level(logging.ERROR, logger="voiceagent.lifecycle"):
        report = await cycle.shutdown()
    assert [name for _, name in events] == ["events", "agents", "services", "aoai", "speech", "core"]
    assert "services.store" in report["failures"]
    assert any("cleanup of step 4 services component store failed" in r.getMessage() for r in caplog.records)


async def test_cleanups_of_one_step_run_in_parallel():
    spans: dict[str, list[float]] = {}
    loop = asyncio.get_running_loop()
    cycle = Lifecycle()

    def pool_stop(name):
        async def stop():
            spans[name] = [loop.time()]
            await asyncio.sleep(0.1)
            spans[name].append(loop.time())

        return stop

    cycle.register("speech", "tts-pool", stop=pool_stop("tts"))
    cycle.register("speech", "stt-pool", stop=pool_stop("stt"))
    await cycle.startup()
    await cycle.shutdown()
    (a0, a1), (b0, b1) = spans["tts"], spans["stt"]
    assert b0 < a1 and a0 < b1  # the two shutdowns overlapped


async def test_deferred_cancellation_is_bounded():
    cycle = Lifecycle(deferred_timeout=0.2)
    stopped = []

    async def stubborn():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(3600)  # ignores the first cancel; the loop's teardown cancels again

    async def cooperative():
        await asyncio.sleep(3600)

    cycle.register("mcp", "stubborn", start=stubborn)
    cycle.register("warmup", "cooperative", start=cooperative)
    cycle.register("core", "c", stop=lambda: stopped.append("core"))
    await cycle.startup()
    await asyncio.sleep(0.01)
    report = await asyncio.wait_for(cycle.shutdown(), 2)
    assert report["deferred_stuck"] == 1
    assert stopped == ["core"]
    assert cycle.results["warmup"].status == "cancelled"
    assert not cycle.deferred_startup_complete


def test_cleanup_on_deferred_step_rejected():
    with pytest.raises(ValueError, match="deferred"):
        Lifecycle().register("mcp", "x", start=None, stop=lambda: None)
    with pytest.raises(ValueError, match="unknown startup step"):
        Lifecycle().register("bogus", "x")


async def test_lifespan_protocol():
    events: list = []
    cycle = recording_cycle(events)
    app = LifespanApp(lambda *a: None, cycle)
    inbox = asyncio.Queue()
    outbox: list = []

    async def send(message):
        outbox.append(message["type"])

    await inbox.put({"type": "lifespan.startup"})
    await inbox.put({"type": "lifespan.shutdown"})
    await app({"type": "lifespan"}, inbox.get, send)
    assert outbox == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert ("stop", "core") in events


async def test_a_stuck_cleanup_is_abandoned_and_reported_the_others_still_run():
    cycle = Lifecycle(cleanup_timeout=0.2)
    stopped = []

    async def hangs():
        await asyncio.sleep(3600)  # a worker process that never exits

    cycle.register("speech", "stt-pool", stop=hangs)
    cycle.register("speech", "tts-pool", stop=lambda: stopped.append("tts"))
    cycle.register("core", "c", stop=lambda: stopped.append("core"))
    await cycle.startup()
    report = await asyncio.wait_for(cycle.shutdown(), 2)
    assert stopped == ["tts", "core"]  # the later steps were still cleaned up
    assert report["failures"] == {"speech.stt-pool": "TimeoutError: not finished within 0.2 s; abandoned"}
    assert cycle.phase == "stopped"
