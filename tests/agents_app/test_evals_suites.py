"""The built-in agent tests (``fixtures/evals/*.yaml``) pass on the shipped agents and dialog: in
process over the engine as ``manage.py test_agents`` runs them with nothing configured (offline
Whisper, Piper and the rules dialog), and the default scenario's suite over the browser socket of
the service started as ``scripts/run`` starts it (a banking conversation over the browser and the
phone is tests/agents_app/test_evals_remote.py's: over a real-time wire the whole banking suite
took CI 141 s of a worker for no path those two do not cover). An edit that breaks one of the
scenario's handoffs makes the same suite fail with exit 1, and the failing expectation names the
handoff."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from agents_app.evals.spec import DEFAULT_DIR, load_suites

ROOT = Path(__file__).resolve().parents[2]
ACCEPTANCE = ROOT / "tests" / "acceptance"
SUITES = ("banking", "default")
SUITE_TIMEOUT_S = 1500  # both suites speak in real time: minutes, not seconds


def run_command(*args: str) -> tuple[int, str]:
    """``manage.py test_agents *args`` in this process: (exit status, what it printed)."""
    from io import StringIO

    out = StringIO()
    try:
        call_command("test_agents", *args, stdout=out, stderr=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + f"\nCommandError: {exc}"
    return 0, out.getvalue()


def statuses(report: Path) -> dict[str, str]:
    """``suite::name`` -> status, from a ``--json`` report."""
    data = json.loads(report.read_text())
    return {f"{r['suite']}::{r['name']}": r["status"] for r in data["tests"]}


def expected_ids(suite: str | None = None) -> set[str]:
    return {t.id for t in load_suites([DEFAULT_DIR]) if suite in (None, t.suite)}


def test_the_builtin_suites_cover_both_scenarios_every_handoff_edge_and_every_builtin_tool():
    """The suites are what the issue asks for: a file per built-in scenario, each of the scenario's
    handoff edges expected somewhere, each built-in tool expected to be called somewhere, spoken
    and keypad turns, and the failure paths (a wrong code, an unknown caller, an ended call)."""
    from agents_app.builtin_tools import BUILTIN_TOOL_NAMES

    tests = load_suites([DEFAULT_DIR])
    assert {t.suite for t in tests} == set(SUITES)
    files = {name: yaml.safe_load((DEFAULT_DIR / f"{name}.yaml").read_text()) for name in SUITES}
    handoffs, tools, spoken, keyed = set(), set(), 0, 0
    for data in files.values():
        for test in data["tests"]:
            for turn in test["turns"]:
                spoken += bool(turn.get("audio"))
                keyed += "dtmf" in turn
                expect = turn.get("expect") or {}
                wanted = expect.get("handoff")
                for h in wanted if isinstance(wanted, list) else [wanted]:
                    if isinstance(h, dict):
                        handoffs.add((test.get("scenario", data["scenario"]), h["from"], h["to"], h["type"]))
                tools |= {c["name"] for c in expect.get("tool_calls") or []}
    for name in SUITES:
        scenario = yaml.safe_load((ROOT / "fixtures" / "scenarios" / f"{name}.yaml").read_text())
        edges = {(name, e["from"], e["to"], e["type"]) for e in scenario["handoffs"]}
        assert edges <= handoffs, f"handoff edges no test expects: {sorted(edges - handoffs)}"
    missing = set(BUILTIN_TOOL_NAMES) - tools
    assert not missing, f"built-in tools no test expects to be called: {sorted(missing)}"
    assert spoken >= 3 and keyed >= 3
    names = " / ".join(t.name for t in tests)
    for path in ("wrong one-time code", "unknown caller", "without a demo profile", "person", "goodbye"):
        assert path in names


@pytest.mark.timeout(SUITE_TIMEOUT_S)
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_builtin_suites_pass_over_the_engine(loaded, tmp_path):
    report = tmp_path / "engine.json"
    junit = tmp_path / "engine.xml"
    code, out = run_command(
        "--transport", "engine", "--json", str(report), "--junit", str(junit), "--concurrency", "3"
    )  # fmt: skip
    assert code == 0, out
    assert statuses(report) == dict.fromkeys(expected_ids(), "passed"), out


@pytest.mark.timeout(SUITE_TIMEOUT_S)
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_broken_handoff_fails_the_banking_suite_naming_the_handoff(loaded, tmp_path):
    """The shipped definitions copied, one edge edited (auth_agent -> cards_agent announced instead
    of discrete) and served: the lost-card test that crosses it fails, exit 1, and the first failing
    expectation is that handoff, with the conversation's transcript."""
    from agents_app.catalog import catalog, sync_files

    root = tmp_path / "fixtures"
    for part in ("agents", "scenarios"):
        shutil.copytree(ROOT / "fixtures" / part, root / part)
    scenario_file = root / "scenarios" / "banking.yaml"
    text = scenario_file.read_text()
    edge = "{from: auth_agent, to: cards_agent, tool: handoff_cards_agent, type: discrete}"
    assert edge in text
    scenario_file.write_text(text.replace(edge, edge.replace("discrete", "announced")))
    result = sync_files(root)
    assert not [p for p in result.problems if p.level == "error"], result.problems
    catalog.reload()
    try:
        report = tmp_path / "broken.json"
        code, out = run_command(str(DEFAULT_DIR / "banking.yaml"), "-k", "lost card", "--json", str(report))
    finally:
        sync_files()  # the shipped definitions again, for whatever runs next in this process
        catalog.reload()
    assert code == 1, out
    data = json.loads(report.read_text())
    [result] = data["tests"]
    assert result["status"] == "failed"
    first = result["failures"][0]
    assert first["expectation"].startswith("handoff"), first
    assert "auth_agent" in first["expected"] and "cards_agent" in first["expected"]
    assert "discrete" in first["expected"] and "announced" in first["actual"]
    assert "[handoff auth_agent -> cards_agent (announced)]" in first["transcript"]
    assert "FAIL" in out and "handoff" in out


# --- over the browser socket of the service as scripts/run starts it ---------------------------------
@pytest.fixture
def service(tmp_path):
    """``scripts/run`` on a free port with nothing configured (offline providers), as a new user
    starts it (tests/acceptance/deployments.py)."""
    sys.path.insert(0, str(ACCEPTANCE))
    try:
        from deployments import RUN, start
    finally:
        sys.path.remove(str(ACCEPTANCE))
    deployment = start(RUN, tmp_path, {"LOG_LEVEL": "INFO"}, api_key=f"evals-{secrets.token_hex(12)}")
    try:
        yield deployment
    finally:
        deployment.stop()


@pytest.mark.timeout(SUITE_TIMEOUT_S + 300)
@pytest.mark.slow
def test_the_default_suite_passes_over_the_browser_socket_of_scripts_run(service, tmp_path):
    report = tmp_path / "browser.json"
    url = f"http://127.0.0.1:{service.port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'db.sqlite3'}"  # the service's (migrated) database
    proc = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "test_agents",
            str(DEFAULT_DIR / "default.yaml"),
            "--transport",
            "browser",
            "--url",
            url,
            "--api-key",
            service.api_key,
            "--json",
            str(report),
            "--concurrency",
            "3",  # a real-time wire: its three callers at once
        ],  # fmt: skip
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SUITE_TIMEOUT_S,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out + "\n" + service.tail()
    assert statuses(report) == dict.fromkeys(expected_ids("default"), "passed"), out
