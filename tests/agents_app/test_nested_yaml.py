"""YAML nested thousands deep is a clear problem, never a RecursionError traceback (issue 31,
point 8): ``manage.py test_agents`` exits 2 naming the file, the definitions loader reports it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agents_app.definitions.files import read_yaml
from voiceagent.yaml_text import YamlProblem, load_yaml

ROOT = Path(__file__).resolve().parents[2]
DEEP = "tests:\n  - " + "[" * 5000 + "]" * 5000 + "\n"
DEEP_MAPPINGS = "tests: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n"


@pytest.mark.parametrize(
    "text", [DEEP, DEEP_MAPPINGS, "a:\n" + "".join(" " * i + "- \n" for i in range(1, 3000))]
)
def test_load_yaml_names_deep_nesting(text):
    with pytest.raises(YamlProblem) as caught:
        load_yaml(text)
    assert "nested more than 64 levels deep" in caught.value.reason and caught.value.line


def test_load_yaml_reports_syntax_with_its_line():
    with pytest.raises(YamlProblem) as caught:
        load_yaml("a: 1\nb: [\n")
    assert caught.value.line is not None


def test_test_agents_on_deeply_nested_yaml_exits_2_with_a_clear_error(tmp_path):
    deep = tmp_path / "deep.yaml"
    deep.write_text(DEEP)
    done = subprocess.run(
        [sys.executable, "manage.py", "test_agents", str(deep)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "deep.yaml: not valid YAML at line 2: nested more than 64 levels deep" in done.stderr
    assert "Traceback" not in done.stderr and "RecursionError" not in done.stderr


def test_an_agent_definition_nested_too_deeply_is_a_problem(tmp_path):
    deep = tmp_path / "agent.yaml"
    deep.write_text("name: " + "[" * 5000 + "]" * 5000 + "\n")
    data, problems = read_yaml(deep)
    assert data is None and "nested more than 64 levels deep" in problems[0].message
