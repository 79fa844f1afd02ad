"""Runs agent tests on a target: one fresh target per test, the greeting, then each caller turn,
checking its expectations and collecting :class:`Failure` s with the conversation's transcript.

The turn fields (and expectation strings) are Jinja templates over ``profile`` (the seeded demo
caller), ``session_id``, ``mfa_code`` (the one-time code the built-in tools issue to that caller
in that session) and ``variables``. A test stops at its first failing turn: what follows depends
on it. An exception in a target makes the test an ``error`` with its message (never a traceback:
the reader of a CI log needs the reason). Tests run one after another unless ``concurrency`` > 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jinja2 import StrictUndefined, TemplateError
from jinja2.sandbox import SandboxedEnvironment

from agents_app.evals.expect import Expect, check_expect
from agents_app.evals.observe import CallerTurn, Target, TurnObservation
from agents_app.evals.spec import EvalTest

__all__ = ["Failure", "RunReport", "Skipped", "TestResult", "format_transcript", "run"]

logger = logging.getLogger("agents_app.evals")
TURN_TIMEOUT_S = 90.0  # a target that neither answers nor fails within this is an error
CLOSE_TIMEOUT_S = 10.0


class Skipped(Exception):
    """Raised by a target that cannot run a test (for example spoken turns on a text-only target)."""


@dataclass
class Failure:
    turn_index: int  # 0: the greeting; n: the n-th caller turn
    expectation: str
    expected: str
    actual: str
    transcript: str  # the conversation up to and including the failing turn


@dataclass
class TestResult:
    __test__ = False  # not a pytest class

    test: EvalTest
    status: str  # passed | failed | error | skipped
    failures: list[Failure] = field(default_factory=list)
    duration_s: float = 0.0
    turns: list[TurnObservation] = field(default_factory=list)  # greeting first
    notes: list[str] = field(default_factory=list)
    session_id: str = ""


@dataclass
class RunReport:
    results: list[TestResult] = field(default_factory=list)
    duration_s: float = 0.0

    def _count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def passed(self) -> int:
        return self._count("passed")

    @property
    def failed(self) -> int:
        return self._count("failed")

    @property
    def errors(self) -> int:
        return self._count("error")

    @property
    def skipped(self) -> int:
        return self._count("skipped")

    @property
    def ok(self) -> bool:
        """No failure and no error (skipped tests do not fail a run)."""
        return not self.failed and not self.errors


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def format_transcript(observations: list[TurnObservation], *, start: int = 0) -> str:
    """The conversation as lines a person reads: who said what, tool calls, handoffs, errors."""
    lines: list[str] = []
    for index, obs in enumerate(observations, start):
        lines.append("  -- greeting --" if index == 0 else f"  -- turn {index} --")
        for message in obs.messages:
            kind, payload = message.get("type"), message.get("payload") or {}
            if kind == "transcript" and payload.get("final") and payload.get("speaker", "user") == "user":
                lines.append(f"  caller: {payload.get('text', '')}")
            elif kind == "response" and payload.get("final"):
                lines.append(f"  {payload.get('agent') or 'agent'}: {payload.get('text', '')}")
            elif kind == "error":
                lines.append(f"  ! error {payload.get('code')}: {payload.get('message')}")
            elif kind == "event" and payload.get("name") == "tool_call":
                args, result = _short(payload.get("args") or {}), _short(payload.get("result"))
                lines.append(f"    [tool {payload.get('tool')}({args}) -> {result}]")
            elif kind == "event" and payload.get("name") == "handoff":
                hop = f"{payload.get('from')} -> {payload.get('to')} ({payload.get('type')})"
                lines.append(f"    [handoff {hop}]")
        if obs.ended:
            lines.append("    [conversation ended]")
    return "\n".join(lines)


class _Renderer:
    """Jinja over the test's variables; a plain string is returned as is."""

    def __init__(self, context: dict[str, Any]):
        self.env = SandboxedEnvironment(undefined=StrictUndefined)
        self.context = context

    def __call__(self, text: str) -> str:
        if "{{" not in text and "{%" not in text:
            return text
        return self.env.from_string(text).render(self.context)


def _profile_for(target: Target, test: EvalTest) -> dict[str, Any] | None:
    """The seeded caller: what the target made (``target.profile``), else the same profile made
    here (profiles are a pure function of seed and scenario)."""
    profile = getattr(target, "profile", None)
    if profile or test.seed is None:
        return profile or None
    from agents_app.profiles import SCENARIOS, generate_profile

    scenario = test.scenario if test.scenario in SCENARIOS else "banking"
    return generate_profile(seed=test.seed, scenario=scenario)


def _context(test: EvalTest, session_id: str, profile: dict[str, Any] | None) -> dict[str, Any]:
    context: dict[str, Any] = {"session_id": session_id, "variables": dict(test.variables)}
    if profile:
        from agents_app.builtin_tools import expected_mfa_code

        context["profile"] = profile
        context["mfa_code"] = expected_mfa_code(session_id, profile)
    return context


OnTurn = Callable[[EvalTest, int, TurnObservation], None]  # (test, 0 = greeting / n, what happened)


class _TestRun:
    """One test on one target."""

    def __init__(
        self, test: EvalTest, target: Target, judge: Any, turn_timeout_s: float, on_turn: OnTurn | None = None
    ):
        self.test = test
        self.target = target
        self.judge = judge
        self.turn_timeout_s = turn_timeout_s
        self.on_turn = on_turn
        self.result = TestResult(test, "passed")
        self.render: Callable[[str], str] = str
        self.where = "open"

    async def call(self, what: str, coro):
        self.where = what
        try:
            async with asyncio.timeout(self.turn_timeout_s):
                return await coro
        except TimeoutError:
            raise RuntimeError(f"{what}: no answer within {self.turn_timeout_s:g} s") from None

    async def run(self) -> None:
        test, result = self.test, self.result
        session_id = await self.call(
            "open", self.target.open(test.scenario, seed=test.seed, variables=dict(test.variables))
        )
        result.session_id = session_id
        self.render = _Renderer(_context(test, session_id, _profile_for(self.target, test)))
        greeting = await self.call("greeting", self.target.greeting())
        result.turns.append(greeting)
        self.seen(0, greeting)
        if test.greeting is not None and not await self.check(0, test.greeting):
            return
        for index, step in enumerate(test.turns, 1):
            if result.turns[-1].ended:
                self.fail(index, "conversation", f"still open for turn {index}", "it had ended")
                return
            self.where = f"turn {index}"
            turn = CallerTurn(
                say=self.render(step.turn.say) if step.turn.say is not None else None,
                dtmf=self.render(step.turn.dtmf) if step.turn.dtmf is not None else None,
                audio=step.turn.audio,
            )
            result.turns.append(await self.call(f"turn {index}", self.target.turn(turn)))
            self.seen(index, result.turns[-1])
            if step.expect is not None and not await self.check(index, step.expect):
                if index < len(test.turns):
                    result.notes.append(f"stopped after turn {index} of {len(test.turns)}")
                return

    def seen(self, index: int, obs: TurnObservation) -> None:
        """A turn is over: whoever follows the run hears of it now (a report must not raise)."""
        if self.on_turn is not None:
            try:
                self.on_turn(self.test, index, obs)
            except Exception:
                logger.exception("agent tests: a turn report failed")

    def fail(self, index: int, expectation: str, expected: str, actual: str) -> None:
        transcript = format_transcript(self.result.turns)
        self.result.failures.append(Failure(index, expectation, expected, actual, transcript))
        self.result.status = "failed"

    async def check(self, index: int, expect: Expect) -> bool:
        obs = self.result.turns[-1]
        self.where = f"turn {index} expectations" if index else "greeting expectations"
        for expectation, expected, actual in check_expect(expect, obs, self.render):
            self.fail(index, expectation, expected, actual)
        if expect.judge and not self.result.failures:
            await self.ask_judge(index, self.render(expect.judge))
        return not self.result.failures

    async def ask_judge(self, index: int, statement: str) -> None:
        label = "greeting" if index == 0 else f"turn {index}"
        if self.judge is None:
            self.result.notes.append(f"{label}: judge skipped (no judge configured): {statement}")
            return
        verdict = await self.judge.ask(statement, format_transcript(self.result.turns))
        if verdict.passed is None:
            self.result.notes.append(f"{label}: judge skipped ({verdict.detail}): {statement}")
        elif verdict.passed:
            self.result.notes.append(f"{label}: judge agreed: {statement}")
        else:
            self.fail(index, "judge", statement, verdict.detail)


async def run_test(
    test: EvalTest,
    make_target: Callable[[], Target],
    *,
    judge: Any = None,
    turn_timeout_s: float = TURN_TIMEOUT_S,
    on_turn: OnTurn | None = None,
) -> TestResult:
    """One test on a fresh target; never raises (a broken target is an ``error`` result);
    ``on_turn`` hears of each turn as it ends."""
    started = time.monotonic()
    target: Target | None = None
    runner: _TestRun | None = None
    result = TestResult(test, "passed")
    try:
        target = make_target()
        runner = _TestRun(test, target, judge, turn_timeout_s, on_turn)
        result = runner.result
        await runner.run()
    except Skipped as exc:
        result.status = "skipped"
        result.notes.append(str(exc) or "skipped by the target")
    except asyncio.CancelledError:
        raise
    except TemplateError as exc:
        where = runner.where if runner else "open"
        result.status = "error"
        result.notes.append(f"{where}: template error: {exc}")
    except Exception as exc:  # the target broke: its message, not a traceback
        where = runner.where if runner else "target"
        result.status = "error"
        message = str(exc) or type(exc).__name__
        result.notes.append(message if message.startswith(where) else f"{where}: {message}")
    finally:
        if target is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await target.close()
    result.duration_s = round(time.monotonic() - started, 3)
    return result


async def run(
    tests: list[EvalTest],
    make_target: Callable[[], Target],
    *,
    on_result: Callable[[TestResult], None] | None = None,
    judge: Any = None,
    concurrency: int = 1,
    turn_timeout_s: float = TURN_TIMEOUT_S,
    on_turn: OnTurn | None = None,
) -> RunReport:
    """Every test on its own fresh target; ``on_result`` as each finishes, ``on_turn`` as each
    turn ends; results in test order."""
    started = time.monotonic()
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(test: EvalTest) -> TestResult:
        async with gate:
            result = await run_test(
                test, make_target, judge=judge, turn_timeout_s=turn_timeout_s, on_turn=on_turn
            )
        if on_result is not None:
            on_result(result)
        return result

    if concurrency <= 1:
        results = [await one(t) for t in tests]
    else:
        results = list(await asyncio.gather(*(one(t) for t in tests)))
    return RunReport(results, round(time.monotonic() - started, 3))
