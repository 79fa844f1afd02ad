"""What an agent-test run shows: a table line per test as it finishes (``[12/40] PASS name  3.1 s``)
with the failed expectation and the failing turn's transcript under it, a summary, and the files
CI reads: JUnit XML (one testcase per test) and JSON (everything, turns included).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agents_app.evals.runner import Failure, RunReport, TestResult

__all__ = ["Printer", "failure_text", "summary", "to_dict", "write_json", "write_junit"]

LABELS = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "skipped": "SKIP"}


def _turn_label(result: TestResult, index: int) -> str:
    if index == 0:
        return "greeting"
    turns = result.test.turns
    if 0 < index <= len(turns):
        turn = turns[index - 1].turn
        said = f"dtmf {turn.dtmf!r}" if turn.dtmf is not None else f"say {turn.say!r}"
        return f"turn {index} ({said}{', spoken' if turn.audio else ''})"
    return f"turn {index}"


def failure_text(result: TestResult, failure: Failure, *, transcript: bool = True) -> str:
    """``turn 2 (say '...'): reply: expected ...; got ...`` and the transcript under it."""
    head = (
        f"{_turn_label(result, failure.turn_index)}: {failure.expectation}: "
        f"expected {failure.expected}, got {failure.actual}"
    )
    return f"{head}\n{failure.transcript}" if transcript and failure.transcript else head


def summary(report: RunReport) -> str:
    text = (
        f"{report.passed} passed, {report.failed} failed, {report.errors} errors, "
        f"{report.skipped} skipped in {report.duration_s:.1f} s"
    )
    judged = sum(1 for r in report.results for n in r.notes if "judge skipped" in n)
    return text + (f"; {judged} judgement(s) skipped" if judged else "")


class Printer:
    """``on_result`` for :func:`agents_app.evals.runner.run`: one line per finished test."""

    def __init__(
        self, write: Callable[[str], Any], total: int, *, style: Callable[[str, str], str] | None = None
    ):
        self.write = write
        self.total = total
        self.done = 0
        self.style = style or (lambda status, text: text)
        self.width = len(str(total))

    def __call__(self, result: TestResult) -> None:
        self.done += 1
        label = self.style(result.status, f"{LABELS.get(result.status, result.status.upper()):<5}")
        progress = f"[{self.done:>{self.width}}/{self.total}]"
        self.write(f"{progress} {label} {result.test.id}  ({result.duration_s:.1f} s)")
        pad = " " * (len(progress) + 1)
        for failure in result.failures:
            for line in failure_text(result, failure).splitlines():
                self.write(pad + line)
        for note in result.notes:
            self.write(f"{pad}{'error: ' if result.status == 'error' else 'note: '}{note}")


class TurnPrinter:
    """``on_turn`` for :func:`agents_app.evals.runner.run`: one line per turn as it ends, so a
    run over a transport (seconds a turn) shows where it is."""

    def __init__(self, write: Callable[[str], Any]):
        self.write = write

    def __call__(self, test: Any, index: int, obs: Any) -> None:
        what = "greeting" if index == 0 else f"turn {index}"
        parts = [f"  {test.id} {what}:"]
        if obs.transcript:
            parts.append(f"caller {obs.transcript!r} ->")
        parts.append(f"{obs.agent or 'agent'}: {_clip(obs.reply) or '(nothing said)'}")
        extras = [f"tool {c.get('name')}" for c in obs.tool_calls]
        extras += [f"handoff {h.get('from')} -> {h.get('to')} ({h.get('type')})" for h in obs.handoffs]
        extras += [f"error {e.get('code')}" for e in obs.errors]
        if obs.first_audio_ms is not None:
            extras.append(f"first audio {obs.first_audio_ms:.0f} ms")
        if obs.ended:
            extras.append("ended")
        self.write(" ".join(parts) + (f"  [{', '.join(extras)}]" if extras else ""))


def _clip(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- files --------------------------------------------------------------------------------------
def _observation(obs: Any) -> dict[str, Any]:
    data = asdict(obs)
    data.pop("messages", None)
    return data


def to_dict(report: RunReport) -> dict[str, Any]:
    """The whole run as JSON-ready data."""
    return {
        "ok": report.ok,
        "summary": {
            "total": len(report.results),
            "passed": report.passed,
            "failed": report.failed,
            "errors": report.errors,
            "skipped": report.skipped,
            "duration_s": report.duration_s,
        },
        "tests": [
            {
                "suite": r.test.suite,
                "name": r.test.name,
                "file": r.test.file,
                "scenario": r.test.scenario,
                "status": r.status,
                "duration_s": r.duration_s,
                "session_id": r.session_id,
                "notes": list(r.notes),
                "failures": [
                    {
                        "turn": f.turn_index,
                        "where": _turn_label(r, f.turn_index),
                        "expectation": f.expectation,
                        "expected": f.expected,
                        "actual": f.actual,
                        "transcript": f.transcript,
                    }
                    for f in r.failures
                ],
                "turns": [_observation(o) for o in r.turns],
            }
            for r in report.results
        ],
    }


def _ready(path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def write_json(report: RunReport, path: str | Path) -> None:
    _ready(path).write_text(json.dumps(to_dict(report), indent=2, default=str, ensure_ascii=False) + "\n")


def write_junit(report: RunReport, path: str | Path) -> None:
    """JUnit XML: a testsuite per suite, a testcase per test; a failure (message = the first failed
    expectation, text = every failure with its transcript), an error or a skip; notes in
    ``system-out``."""
    root = ET.Element("testsuites", name="agent tests")
    suites: dict[str, list[TestResult]] = {}
    for result in report.results:
        suites.setdefault(result.test.suite, []).append(result)
    for name, results in suites.items():
        suite = ET.SubElement(root, "testsuite", name=name)
        for result in results:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=name,
                name=result.test.name,
                file=result.test.file,
                time=f"{result.duration_s:.3f}",
            )
            if result.status == "failed":
                first = result.failures[0] if result.failures else None
                message = failure_text(result, first, transcript=False) if first else "failed"
                node = ET.SubElement(case, "failure", message=message, type="expectation")
                node.text = "\n\n".join(failure_text(result, f) for f in result.failures)
            elif result.status == "error":
                node = ET.SubElement(case, "error", message=result.notes[0] if result.notes else "error")
                node.text = "\n".join(result.notes)
            elif result.status == "skipped":
                ET.SubElement(case, "skipped", message="; ".join(result.notes) or "skipped")
            if result.notes and result.status != "error":
                ET.SubElement(case, "system-out").text = "\n".join(result.notes)
        _counts(suite, results)
    _counts(root, report.results)
    root.set("time", f"{report.duration_s:.3f}")
    ET.indent(root)
    ET.ElementTree(root).write(_ready(path), encoding="utf-8", xml_declaration=True)


def _counts(node: ET.Element, results: list[TestResult]) -> None:
    node.set("tests", str(len(results)))
    for key, status in (("failures", "failed"), ("errors", "error"), ("skipped", "skipped")):
        node.set(key, str(sum(1 for r in results if r.status == status)))
    if node.tag == "testsuite":
        node.set("time", f"{sum(r.duration_s for r in results):.3f}")
