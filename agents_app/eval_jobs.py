"""The admin's "Run agent tests" in the background: the action starts a job and answers at once
with a page that follows it (no request waits for the tests).

Why the job runs where it does: the engine target uses the process's providers, which belong to
the loop the service started on; so in a served process the job is a task on that loop (handed
over from the view's thread), and only where there is none (a WSGI dev server, the test client)
does it get a thread with a loop of its own, where :func:`start_engine` starts the providers it
needs and stops them after.

Its progress lives in the shared cache (``evaljob:<id>``, :data:`JOB_TTL_S`) as plain data, so
the page reads it from whichever worker answers; a process runs :data:`MAX_RUNNING` jobs at once
at most (a second click is sent to the running one).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
import time
import uuid
from dataclasses import asdict
from typing import Any

from django.core.cache import cache

from voiceagent import cache_io

logger = logging.getLogger("agents_app.evals")

__all__ = ["ADMIN_EVALS_TIMEOUT_S", "job_state", "run_inline", "run_suites", "start_job", "wait"]

ADMIN_EVALS_TIMEOUT_S = 300.0  # a job stops after this, listing the tests that did not finish
JOB_TTL_S = 3600
MAX_RUNNING = 1
EVAL_STATUSES = ("passed", "failed", "error", "skipped")
_running: dict[str, threading.Event] = {}  # this process's jobs -> set when finished
_lock = threading.Lock()


def _key(job_id: str) -> str:
    return f"evaljob:{job_id}"


def result_data(result: Any) -> dict[str, Any]:
    """A finished test as plain data (what the page shows; kept in the cache)."""
    test = result.test
    return {
        "test": {"id": test.id, "suite": test.suite, "name": test.name, "scenario": test.scenario},
        "status": result.status,
        "duration_s": round(result.duration_s, 2),
        "session_id": result.session_id,
        "notes": list(result.notes),
        "failures": [asdict(f) for f in result.failures],
        "turns": [
            {
                "transcript": t.transcript,
                "agent": t.agent,
                "reply": t.reply,
                "ended": t.ended,
                "tool_calls": [{"name": c.get("name"), "ok": c.get("ok", True)} for c in t.tool_calls],
                "handoffs": [
                    {"from": h.get("from"), "to": h.get("to"), "type": h.get("type")} for h in t.handoffs
                ],
            }
            for t in result.turns
        ],
    }


def _summary(state: dict[str, Any]) -> dict[str, Any]:
    results = state["results"]
    counts = {status: sum(r["status"] == status for r in results) for status in EVAL_STATUSES}
    state["counts"] = counts
    state["finished"] = len(results)
    state["ok"] = bool(results) and not state["timed_out"] and counts["failed"] == counts["error"] == 0
    return state


async def run_suites(
    scenarios: list[str], state: dict[str, Any], publish: Any, timeout_s: float = ADMIN_EVALS_TIMEOUT_S
) -> dict[str, Any]:
    """Run the suites of ``scenarios`` on the engine target, filling ``state`` and calling
    ``await publish(state)`` after each turn and test; returns the final state."""
    from agents_app.evals import runner, spec, targets
    from agents_app.evals.engine_target import stop_engine
    from agents_app.evals.judge import judge_for_runtime

    wanted = {name.lower() for name in scenarios}
    try:
        tests = [t for t in spec.load_suites([spec.DEFAULT_DIR]) if t.scenario.lower() in wanted]
    except spec.SpecError as exc:
        state.update(problems=list(exc.problems), done=True)
        await publish(_summary(state))
        return state
    state["total"] = len(tests)
    state["pending"] = [t.id for t in tests]
    await publish(_summary(state))
    loop = asyncio.get_running_loop()
    updates: set[asyncio.Task] = set()

    def later() -> None:  # the runner's hooks are plain calls: publish from a task
        task = loop.create_task(publish(_summary(state)))
        updates.add(task)
        task.add_done_callback(updates.discard)

    def on_turn(test: Any, index: int, obs: Any) -> None:
        state["running"] = {"id": test.id, "turn": index, "of": len(test.turns)}
        later()

    def on_result(result: Any) -> None:
        state["results"].append(result_data(result))
        state["pending"] = [t for t in state["pending"] if t != result.test.id]
        state["running"] = None
        later()

    try:
        async with asyncio.timeout(timeout_s):
            make = targets.make_target("engine")
            await runner.run(tests, make, on_result=on_result, on_turn=on_turn, judge=judge_for_runtime())
    except TimeoutError:
        state["timed_out"] = True
    except Exception as exc:
        logger.exception("agent tests job failed")
        state["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        await stop_engine()  # only what the run started (a service's own providers stay)
        if updates:
            await asyncio.gather(*updates, return_exceptions=True)
    state.update(done=True, running=None, finished_at=time.time())
    await publish(_summary(state))
    return state


def _new_state(job_id: str, scenarios: list[str], timeout_s: float) -> dict[str, Any]:
    return {
        "id": job_id,
        "scenarios": scenarios,
        "started_at": time.time(),
        "finished_at": None,
        "timeout_s": timeout_s,
        "total": None,
        "pending": [],
        "running": None,
        "results": [],
        "problems": [],
        "timed_out": False,
        "error": "",
        "done": False,
    }


def run_inline(scenarios: list[str], timeout_s: float = ADMIN_EVALS_TIMEOUT_S) -> dict[str, Any]:
    """The same run, waited for (a command, a test): its final state."""
    from asgiref.sync import async_to_sync

    async def nowhere(_state: dict[str, Any]) -> None:
        return None

    state = _new_state("inline", sorted(scenarios), timeout_s)
    return async_to_sync(run_suites)(state["scenarios"], state, nowhere, timeout_s)


def _server_loop() -> asyncio.AbstractEventLoop | None:
    """The loop the service started on (its providers live there); None outside a served process
    (a WSGI dev server, the test client, a command)."""
    from voiceagent.lifecycle import lifecycle

    loop = lifecycle.loop
    return loop if loop is not None and lifecycle.accepting and loop.is_running() else None


def start_job(scenarios: list[str], timeout_s: float = ADMIN_EVALS_TIMEOUT_S) -> tuple[str, bool]:
    """(job id, started): a new job in the background, or the id of this process's running one."""
    with _lock:
        running = [job_id for job_id, finished in _running.items() if not finished.is_set()]
        if len(running) >= MAX_RUNNING:
            return running[0], False
        job_id = uuid.uuid4().hex
        finished = _running[job_id] = threading.Event()
    state = _new_state(job_id, sorted(scenarios), timeout_s)
    cache.set(_key(job_id), state, JOB_TTL_S)

    async def publish(snapshot: dict[str, Any]) -> None:
        # a copy taken on the loop: the run goes on changing ``state`` while Redis is written
        await cache_io.call(cache.set, _key(job_id), copy.deepcopy(snapshot), JOB_TTL_S)

    async def job() -> None:
        try:
            await run_suites(state["scenarios"], state, publish, timeout_s)
        finally:
            finished.set()
            with _lock:
                for done_id in [k for k, event in _running.items() if event.is_set() and k != job_id]:
                    _running.pop(done_id, None)

    loop = _server_loop()
    if loop is not None:
        asyncio.run_coroutine_threadsafe(job(), loop)
    else:
        threading.Thread(
            target=asyncio.run, args=(job(),), name=f"agent-tests-{job_id[:8]}", daemon=True
        ).start()
    return job_id, True


def job_state(job_id: str) -> dict[str, Any] | None:
    """The job's progress and results as last published (None: unknown or expired)."""
    return cache.get(_key(job_id))


def wait(job_id: str, timeout_s: float) -> bool:
    """Block until this process's job ``job_id`` has finished (tests and commands; never a view)."""
    finished = _running.get(job_id)
    return finished.wait(timeout_s) if finished is not None else job_state(job_id) is not None
