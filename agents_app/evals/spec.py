"""Agent test files (``fixtures/evals/*.yaml``): parsing and validation, every problem at once.

A file holds a suite of conversation tests (see ``docs/evals.md``): each test opens a session on a
scenario (optionally with a seeded demo caller and session variables), may check the greeting,
then plays caller turns (typed or spoken text, keypad digits) with expectations. Anything unknown
is an error naming the file, the test and the key; :func:`load_suites` collects them all and
raises one :class:`SpecError`, never a traceback, like ``validate_agents``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from jinja2 import TemplateSyntaxError
from jinja2.sandbox import SandboxedEnvironment

from agents_app.evals.expect import Expect, parse_expect
from agents_app.evals.observe import CallerTurn
from voiceagent.yaml_text import YamlProblem, load_yaml

__all__ = ["DEFAULT_DIR", "EvalTest", "SpecError", "TestTurn", "load_suites", "parse_suite"]

DEFAULT_DIR = Path(settings.BASE_DIR) / "fixtures" / "evals"
FILE_KEYS = ("suite", "scenario", "tests")
TEST_KEYS = ("name", "scenario", "seed", "variables", "greeting", "turns")
TURN_KEYS = ("say", "dtmf", "audio", "expect")
DTMF_CHARS = set("0123456789*#ABCDabcd")
_jinja = SandboxedEnvironment()


class SpecError(Exception):
    """The test files have problems; ``problems`` lists every one, each a line."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class TestTurn:
    """One caller turn: its fields are Jinja templates until the runner renders them."""

    __test__ = False  # not a pytest class

    turn: CallerTurn
    expect: Expect | None = None


@dataclass(frozen=True)
class EvalTest:
    suite: str
    name: str
    file: str
    scenario: str
    seed: int | None = None
    variables: dict[str, Any] = field(default_factory=dict)
    greeting: Expect | None = None
    turns: list[TestTurn] = field(default_factory=list)

    @property
    def id(self) -> str:
        """``suite::name``, what ``-k`` and the reports use."""
        return f"{self.suite}::{self.name}"


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _template(text: str, where: str, problems: list[str]) -> None:
    try:
        _jinja.parse(text)
    except TemplateSyntaxError as exc:
        problems.append(f"{where}: template error: {exc.message} (line {exc.lineno})")


def _turn(raw: Any, where: str, problems: list[str]) -> TestTurn | None:
    if not isinstance(raw, dict):
        problems.append(f"{where}: expected a mapping with say or dtmf")
        return None
    for key in raw:
        if key not in TURN_KEYS:
            problems.append(f"{where}: unknown key {key!r} (known: {', '.join(TURN_KEYS)})")
    say, dtmf, audio = raw.get("say"), raw.get("dtmf"), raw.get("audio", False)
    if (say is None) == (dtmf is None):
        problems.append(f"{where}: give exactly one of say, dtmf")
        return None
    if isinstance(dtmf, int) and not isinstance(dtmf, bool):
        dtmf = str(dtmf)
    text = say if say is not None else dtmf
    if not isinstance(text, str) or not text.strip():
        problems.append(f"{where}: {'say' if say is not None else 'dtmf'}: expected a non-empty string")
        return None
    _template(text, where, problems)
    if dtmf is not None and "{" not in dtmf and not set(dtmf.strip()) <= DTMF_CHARS:
        problems.append(f"{where}: dtmf: only 0-9 * # A-D, got {dtmf!r}")
    if not isinstance(audio, bool):
        problems.append(f"{where}: audio: expected true or false")
        audio = False
    if audio and dtmf is not None:
        problems.append(f"{where}: audio applies to say, not dtmf")
    expect = parse_expect(raw.get("expect"), f"{where}: expect", problems)
    return TestTurn(CallerTurn(say=say, dtmf=dtmf, audio=audio), expect)


def _test(raw: Any, i: int, file: str, suite: str, scenario: Any, problems: list[str]) -> EvalTest | None:
    if not isinstance(raw, dict):
        problems.append(f"{file}: tests[{i}]: expected a mapping with name and turns")
        return None
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        problems.append(f"{file}: tests[{i}]: name: a non-empty name is required")
        name = f"tests[{i}]"
    where = f"{file}: test {name!r}"
    for key in raw:
        if key not in TEST_KEYS:
            problems.append(f"{where}: unknown key {key!r} (known: {', '.join(TEST_KEYS)})")
    scenario = raw.get("scenario", scenario)
    if not isinstance(scenario, str) or not scenario.strip():
        problems.append(f"{where}: no scenario (set scenario on the test or the file)")
        scenario = ""
    seed = raw.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
        problems.append(f"{where}: seed: expected a whole number >= 0")
        seed = None
    variables = raw.get("variables") or {}
    if not isinstance(variables, dict):
        problems.append(f"{where}: variables: expected a mapping")
        variables = {}
    greeting = None
    if "greeting" in raw:
        greeting = parse_expect(raw["greeting"], f"{where}: greeting", problems)
    turns_raw = raw.get("turns") or []
    if not isinstance(turns_raw, list):
        problems.append(f"{where}: turns: expected a list")
        turns_raw = []
    if not turns_raw and greeting is None:
        problems.append(f"{where}: nothing to test (no turns and no greeting)")
    turns = [_turn(t, f"{where}: turn {n}", problems) for n, t in enumerate(turns_raw, 1)]
    return EvalTest(
        suite=suite,
        name=name.strip(),
        file=file,
        scenario=scenario.strip(),
        seed=seed,
        variables=dict(variables),
        greeting=greeting,
        turns=[t for t in turns if t is not None],
    )


def parse_suite(text: str, file: str, problems: list[str], *, stem: str = "") -> list[EvalTest]:
    """The tests of one file's text; problems are appended (each naming ``file``)."""
    try:
        data = load_yaml(text)
    except YamlProblem as exc:
        at = f" at line {exc.line}" if exc.line else ""
        problems.append(f"{file}: not valid YAML{at}: {exc.reason}")
        return []
    if not isinstance(data, dict):
        problems.append(f"{file}: expected a mapping with tests (and optionally suite, scenario)")
        return []
    for key in data:
        if key not in FILE_KEYS:
            problems.append(f"{file}: unknown key {key!r} (known: {', '.join(FILE_KEYS)})")
    suite = data.get("suite", stem or Path(file).stem)
    if not isinstance(suite, str) or not suite.strip():
        problems.append(f"{file}: suite: expected a non-empty string")
        suite = stem or Path(file).stem
    tests_raw = data.get("tests")
    if not isinstance(tests_raw, list) or not tests_raw:
        problems.append(f"{file}: tests: expected a non-empty list of tests")
        return []
    tests = []
    seen: set[str] = set()
    for i, raw in enumerate(tests_raw):
        test = _test(raw, i, file, suite.strip(), data.get("scenario"), problems)
        if test is None:
            continue
        if test.name in seen:
            problems.append(f"{file}: test {test.name!r}: the name is used twice in this file")
        seen.add(test.name)
        tests.append(test)
    return tests


def _files(path: Path, problems: list[str]) -> list[Path]:
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
        if not found:
            problems.append(f"{_shown(path)}: no *.yaml test files in this folder")
        return found
    if path.is_file():
        return [path]
    problems.append(f"{_shown(path)}: no such file or folder")
    return []


def load_suites(paths: list[str | Path] | None = None) -> list[EvalTest]:
    """Every test of ``paths`` (files, or folders of ``*.yaml``; default :data:`DEFAULT_DIR`), in
    file order; :class:`SpecError` with every problem when any file has one."""
    problems: list[str] = []
    tests: list[EvalTest] = []
    for path in [Path(p) for p in (paths or [DEFAULT_DIR])]:
        for file in _files(path, problems):
            shown = _shown(file)
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                problems.append(f"{shown}: cannot read: {exc}")
                continue
            tests.extend(parse_suite(text, shown, problems, stem=file.stem))
    if problems:
        raise SpecError(problems)
    return tests
