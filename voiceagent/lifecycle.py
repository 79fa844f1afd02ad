"""Startup steps 1-8, deferred background steps, and ordered shutdown (spec "Startup and shutdown").

Components plug into the NAMED steps with :meth:`Lifecycle.register`; this module owns only
the order, timing, logging and failure isolation:

- steps 1-6 (core, speech, aoai, services, agents, events) run in order and block: requests
  wait for them, then ``/health`` answers 200;
- steps 7-8 (warmup, mcp) run concurrently in the background; ``/ready`` turns 200 when both
  are done;
- shutdown cancels the deferred tasks (bounded by ``SHUTDOWN_DEFERRED_TIMEOUT``, 5 s), then
  runs cleanups in reverse order 6..1; cleanups of one step run in parallel; an error in one
  cleanup is logged and the others still run.

A failing startup hook is logged with its step and component name and recorded; the service
still starts (``/readiness`` reports the broken component), because a crash loop helps nobody.

It runs under servers that send ASGI lifespan events (uvicorn) through
:class:`LifespanApp`, and under daphne (no lifespan events) through
:func:`install_twisted_hooks`; as a last resort the first request starts it.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("voiceagent.lifecycle")

HookFn = Callable[[], Awaitable[Any] | Any]


@dataclass(frozen=True)
class Step:
    number: int
    name: str
    blocking: bool
    purpose: str


STEPS: tuple[Step, ...] = (
    Step(1, "core", True, "session cache, connection manager, session manager"),
    Step(2, "speech", True, "speech synthesis and recognition client pools"),
    Step(3, "aoai", True, "language-model client"),
    Step(4, "services", True, "conversation store, telephony caller, phrase manager"),
    Step(5, "agents", True, "load agents from definition files, build handoff map"),
    Step(6, "events", True, "tool registry, telephony event handlers"),
    Step(7, "warmup", False, "pre-warm model connections and speech tokens"),
    Step(8, "mcp", False, "validate MCP servers, register tools"),
)
STEP_BY_NAME = {s.name: s for s in STEPS}


@dataclass
class Hook:
    component: str
    start: HookFn | None = None
    stop: HookFn | None = None


@dataclass
class StepResult:
    status: str = "pending"  # pending | running | ok | failed | skipped | cancelled
    duration_ms: float | None = None
    errors: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "status": self.status,
            "duration_ms": self.duration_ms,
            "errors": dict(self.errors),
            "notes": list(self.notes),
        }


async def _call(fn: HookFn) -> Any:
    result = fn()
    if inspect.isawaitable(result):
        result = await result
    return result


class Lifecycle:
    """The process's startup/shutdown state machine. One instance per process: :data:`lifecycle`."""

    def __init__(self, deferred_timeout: float = 5.0, cleanup_timeout: float = 10.0):
        self.deferred_timeout = deferred_timeout
        # each step's cleanups: a stuck one (a worker process that will not exit, a store that
        # does not answer) must not keep the process from stopping - the supervisor would kill it
        self.cleanup_timeout = cleanup_timeout
        self.hooks: dict[str, list[Hook]] = {s.name: [] for s in STEPS}
        self.results: dict[str, StepResult] = {s.name: StepResult() for s in STEPS}
        self.phase = "idle"  # idle | starting | accepting | stopping | stopped
        self.started_at: float | None = None
        self.accepting_at: float | None = None
        self.warmup_completed = False
        self.mcp_ready = False
        self.deferred_startup_complete = False
        self.shutdown_report: dict[str, Any] = {}
        self.warmup_results: dict[str, Any] = {"openai": False, "tts_pool": 0, "stt_pool": 0}
        self._blocking_done: asyncio.Event | None = None
        self._start_task: asyncio.Task | None = None
        self._deferred: list[asyncio.Task] = []
        self._watcher: asyncio.Task | None = None

    # --- registration ------------------------------------------------------------------------
    def register(
        self, step: str, component: str, start: HookFn | None = None, stop: HookFn | None = None
    ) -> None:
        """Plug ``start`` (and its ``stop`` cleanup) into a named step.

        Cleanups belong to blocking steps only: resources opened by a deferred step are owned by
        a blocking step's component (for example the MCP manager is created in ``core``).
        """
        if step not in STEP_BY_NAME:
            raise ValueError(f"unknown startup step {step!r}; steps are {', '.join(STEP_BY_NAME)}")
        if stop is not None and not STEP_BY_NAME[step].blocking:
            raise ValueError(f"step {step!r} is deferred; register the cleanup on a blocking step")
        self.hooks[step].append(Hook(component, start, stop))

    def load_plugins(self, modules: tuple[str, ...] | list[str]) -> None:
        """Import ``LIFECYCLE_PLUGINS``; each may define ``register(lifecycle)``."""
        for name in modules:
            module = importlib.import_module(name)
            if hasattr(module, "register"):
                module.register(self)
            logger.info("lifecycle plugin %s loaded", name)

    # --- startup -----------------------------------------------------------------------------
    @property
    def accepting(self) -> bool:
        return self.phase == "accepting"

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop the service started on (where its providers live), once started."""
        return self._start_task.get_loop() if self._start_task is not None else None

    def begin(self) -> asyncio.Task:
        """Start (once) on the running loop; returns the blocking-startup task."""
        if self._start_task is None:
            self._blocking_done = asyncio.Event()
            self._start_task = asyncio.get_running_loop().create_task(
                self.startup(), name="lifecycle-startup"
            )
        return self._start_task

    async def ensure_started(self) -> None:
        """Wait until the blocking steps are done, starting them if nobody did."""
        if self.phase in ("accepting", "stopping", "stopped"):
            return
        self.begin()
        assert self._blocking_done is not None
        await self._blocking_done.wait()

    async def startup(self) -> None:
        """Run steps 1-6 in order, then launch steps 7-8 in the background."""
        if self._blocking_done is None:
            self._blocking_done = asyncio.Event()
        if self.phase != "idle":
            await self._blocking_done.wait()
            return
        self.phase = "starting"
        self.started_at = time.monotonic()
        logger.info("startup: %d blocking steps, then %d deferred", 6, 2)
        try:
            for step in STEPS:
                if step.blocking:
                    await self._run_step(step)
        finally:
            self.phase = "accepting"
            self.accepting_at = time.monotonic()
            self._blocking_done.set()
        # Everything loaded so far (Django, models, agents, providers) lives as long as the process:
        # move it out of the collector's sight so full collections stay short under load.
        gc.collect()
        gc.freeze()
        total = (self.accepting_at - self.started_at) * 1000
        logger.info("startup: accepting requests after %.1f ms; deferred steps running", total)
        loop = asyncio.get_running_loop()
        self._deferred = [
            loop.create_task(self._run_deferred(step), name=f"lifecycle-{step.name}")
            for step in STEPS
            if not step.blocking
        ]
        self._watcher = loop.create_task(self._watch_deferred(), name="lifecycle-deferred-watch")

    async def _run_step(self, step: Step) -> None:
        result = self.results[step.name]
        hooks = [h for h in self.hooks[step.name] if h.start is not None]
        if not hooks:
            result.status = "skipped"
            result.duration_ms = 0.0
            result.notes.append("nothing registered for this step")
            logger.info(
                "step %d %s: nothing to do (no component registered)",
                step.number,
                step.name,
                extra={"step": step.name, "duration_ms": 0.0},
            )
            return
        result.status = "running"
        began = time.perf_counter()
        for hook in hooks:
            try:
                note = await _call(hook.start)  # type: ignore[arg-type]
                if isinstance(note, str) and note:
                    result.notes.append(f"{hook.component}: {note}")
            except asyncio.CancelledError:
                result.status = "cancelled"
                raise
            except Exception as exc:
                result.errors[hook.component] = f"{type(exc).__name__}: {exc}"
                logger.error(
                    "step %d %s: component %s failed: %s",
                    step.number,
                    step.name,
                    hook.component,
                    exc,
                    exc_info=True,
                    extra={"step": step.name},
                )
        result.duration_ms = round((time.perf_counter() - began) * 1000, 2)
        result.status = "failed" if result.errors else "ok"
        log = logger.warning if result.errors else logger.info
        log(
            "step %d %s: %s in %.1f ms%s",
            step.number,
            step.name,
            result.status,
            result.duration_ms,
            "".join(f"; {n}" for n in result.notes),
            extra={"step": step.name, "duration_ms": result.duration_ms},
        )

    async def _run_deferred(self, step: Step) -> None:
        try:
            await self._run_step(step)
        finally:
            if step.name == "warmup":
                self.warmup_completed = self.results["warmup"].status in ("ok", "skipped", "failed")
            elif step.name == "mcp":
                self.mcp_ready = self.results["mcp"].status in ("ok", "skipped", "failed")

    async def _watch_deferred(self) -> None:
        await asyncio.gather(*self._deferred, return_exceptions=True)
        if self.phase == "accepting":
            self.deferred_startup_complete = self.warmup_completed and self.mcp_ready
            logger.info("deferred startup complete")

    # --- shutdown ----------------------------------------------------------------------------
    async def shutdown(self) -> dict[str, Any]:
        """Cancel deferred work (bounded), then clean up steps 6..1. Never raises."""
        if self.phase in ("stopping", "stopped", "idle"):
            return self.shutdown_report
        self.phase = "stopping"
        began = time.perf_counter()
        logger.info("shutdown: cancelling deferred tasks (timeout %.1f s)", self.deferred_timeout)
        pending = [t for t in self._deferred if not t.done()]
        for task in pending:
            task.cancel()
        stuck: set[asyncio.Task] = set()
        if pending:
            _, stuck = await asyncio.wait(pending, timeout=self.deferred_timeout)
        for task in pending:
            name = task.get_name().removeprefix("lifecycle-")
            if name in self.results and self.results[name].status in ("pending", "running"):
                self.results[name].status = "cancelled"
        cancel_ms = round((time.perf_counter() - began) * 1000, 1)
        if stuck:
            logger.warning(
                "shutdown: %d deferred task(s) ignored cancellation for %.1f s; moving on",
                len(stuck),
                self.deferred_timeout,
            )
        order: list[str] = []
        failures: dict[str, str] = {}
        for step in reversed([s for s in STEPS if s.blocking]):
            hooks = [h for h in self.hooks[step.name] if h.stop is not None]
            if not hooks:
                continue
            order.append(step.name)
            outcomes = await self._clean_up(hooks)
            for hook, outcome in zip(hooks, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    failures[f"{step.name}.{hook.component}"] = f"{type(outcome).__name__}: {outcome}"
                    logger.error(
                        "shutdown: cleanup of step %d %s component %s failed: %s",
                        step.number,
                        step.name,
                        hook.component,
                        outcome,
                        extra={"step": step.name},
                    )
            logger.info("shutdown: step %d %s cleaned up", step.number, step.name, extra={"step": step.name})
        self.phase = "stopped"
        self.shutdown_report = {
            "deferred_cancel_ms": cancel_ms,
            "deferred_stuck": len(stuck),
            "cleanup_order": order,
            "failures": failures,
            "total_ms": round((time.perf_counter() - began) * 1000, 1),
        }
        logger.info("shutdown complete in %.1f ms", self.shutdown_report["total_ms"])
        return self.shutdown_report

    async def _clean_up(self, hooks: list[Hook]) -> list[Any]:
        """Run one step's cleanups together, each bounded by ``cleanup_timeout``: the outcome of
        each (its result, its exception, or a ``TimeoutError`` for one cancelled as stuck)."""
        tasks = [asyncio.ensure_future(_call(h.stop)) for h in hooks]  # type: ignore[arg-type]
        _, stuck = await asyncio.wait(tasks, timeout=self.cleanup_timeout)
        for task in stuck:
            task.cancel()
        outcomes: list[Any] = []
        for task in tasks:
            if task in stuck:
                outcomes.append(TimeoutError(f"not finished within {self.cleanup_timeout:g} s; abandoned"))
            elif task.cancelled():
                outcomes.append(asyncio.CancelledError())
            else:
                outcomes.append(task.exception() or task.result())
        return outcomes

    def snapshot(self) -> dict[str, Any]:
        """State for health endpoints and logs."""
        return {
            "phase": self.phase,
            "warmup_completed": self.warmup_completed,
            "mcp_ready": self.mcp_ready,
            "deferred_startup_complete": self.deferred_startup_complete,
            "steps": {name: r.as_dict() for name, r in self.results.items()},
        }


lifecycle = Lifecycle()


class LifespanApp:
    """ASGI wrapper: answers lifespan events (uvicorn) and gates requests on blocking startup."""

    def __init__(self, app, cycle: Lifecycle | None = None):
        self.app = app
        self.cycle = cycle or lifecycle

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if not self.cycle.accepting:
            await self.cycle.ensure_started()
        await self.app(scope, receive, send)

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    self.cycle.begin()
                    await self.cycle.ensure_started()
                except Exception as exc:  # pragma: no cover - startup never raises by design
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.cycle.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return


def install_twisted_hooks(cycle: Lifecycle | None = None) -> bool:
    """Under daphne (Twisted's asyncio reactor): start when the reactor runs, clean up before it stops.

    Daphne sends no ASGI lifespan events, so without this, shutdown would never run. Returns
    whether a Twisted reactor was found.
    """
    import sys

    if "twisted.internet.reactor" not in sys.modules:
        return False
    from twisted.internet import defer, reactor

    cycle = cycle or lifecycle

    def start() -> None:
        cycle.begin()

    def stop():
        return defer.Deferred.fromFuture(asyncio.ensure_future(cycle.shutdown()))

    reactor.callWhenRunning(start)
    reactor.addSystemEventTrigger("before", "shutdown", stop)
    return True
