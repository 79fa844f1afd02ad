"""Agent tests over the browser socket against the same tests in process: what a transport costs.

``manage.py test_agents`` runs the shipped suites (``fixtures/evals/``, or ``--paths``) twice: over
the in-process engine, and over the browser socket of the service as ``scripts/run`` starts it
(daphne, embedded defaults, its own SQLite database). Each run's time is the sum of its tests'
durations (the engine's provider start-up is not a test's). Over the browser the test caller
speaks in real time and, by default, tells the service it played the agent's audio at once
(``control played``); ``--realtime`` adds a third run that hears it out as a person would.

Target (issue 34): the browser run within 2x of the in-process one. One JSON line:

    .venv/bin/python bench/bench_agent_tests.py [--realtime] [--paths fixtures/evals/banking.yaml]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [
    str(Path(__file__).resolve().parent),
    str(Path(__file__).resolve().parents[1] / "tests" / "support"),
]

import proc_cpu  # noqa: E402
from bench_capacity import log_problems, server  # noqa: E402
from servers import base_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 2.0


def run_suites(paths: list[str], transport: str, env: dict[str, str], out: Path, *extra: str) -> dict:
    """One ``test_agents`` run; its tests' summed duration, counts and wall time."""
    command = [
        sys.executable,
        "manage.py",
        "test_agents",
        *paths,
        "--transport",
        transport,
        "--json",
        str(out),
    ]
    started = time.monotonic()
    done = subprocess.run(
        [*command, *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600, check=False
    )
    wall = time.monotonic() - started
    if not out.exists():
        return {"error": (done.stdout + done.stderr)[-600:], "exit": done.returncode}
    report = json.loads(out.read_text())
    tests = report["tests"]
    return {
        "tests_s": round(sum(t["duration_s"] for t in tests), 2),
        "wall_s": round(wall, 1),
        "tests": len(tests),
        "passed": sum(t["status"] == "passed" for t in tests),
        "exit": done.returncode,
        "not_passed": [
            f"{t['name']}: {t['status']} {(t['failures'] or [{}])[0].get('where', '')} "
            f"{(t['failures'] or [{}])[0].get('actual', '')} {' '.join(t['notes'])}"[:300]
            for t in tests
            if t["status"] != "passed"
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--paths", nargs="*", default=["fixtures/evals/"], help="test files or folders")
    parser.add_argument(
        "--realtime", action="store_true", help="also over the browser heard out in real time"
    )
    args = parser.parse_args()
    load, speed = os.getloadavg()[0], proc_cpu.python_speed()
    figures: dict = {"bench": "agent_tests", "paths": args.paths}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        engine_env = base_env(tmp / "engine", LOG_LEVEL="WARNING")
        (tmp / "engine").mkdir()
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=engine_env, check=True, timeout=300
        )
        figures["engine"] = run_suites(args.paths, "engine", engine_env, tmp / "engine.json")
        (tmp / "server").mkdir()
        with server("daphne", tmp / "server") as (ws_base, _, log):
            url = ws_base.replace("ws://", "http://")
            client_env = base_env(tmp / "client")
            figures["browser"] = run_suites(
                args.paths, "browser", client_env, tmp / "browser.json", "--url", url
            )
            if args.realtime:
                figures["browser_realtime"] = run_suites(
                    args.paths, "browser", client_env, tmp / "realtime.json", "--url", url, "--realtime"
                )
            figures["server_log"] = log_problems(log)[:5]
    engine = figures["engine"].get("tests_s")
    for name in ("browser", "browser_realtime"):
        took = figures.get(name, {}).get("tests_s")
        if engine and took:
            figures[f"{name}_to_engine"] = round(took / engine, 2)
    ratio = figures.get("browser_to_engine")
    runs = [figures[k] for k in ("engine", "browser", "browser_realtime") if k in figures]
    figures.update(
        target_ratio=TARGET_RATIO,
        load_average_before=round(load, 2),
        machine_python_loop_ms=speed,
        command=".venv/bin/python bench/bench_agent_tests.py " + " ".join(sys.argv[1:]),
    )
    figures["pass"] = ratio is not None and ratio <= TARGET_RATIO and all(r.get("exit") == 0 for r in runs)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
