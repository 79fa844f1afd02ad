"""The first start shows progress: scripts/_setup.sh passes pip's own output through and times each
step (it used to run pip with -q into a log, and the terminal stayed silent for minutes)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAKE_PIP = """#!/usr/bin/env bash
echo "Collecting fake-package==1.0 ($*)"
echo "Successfully installed fake-package-1.0"
"""


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_setup_shows_pips_output_and_each_steps_time(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "_setup.sh", tmp_path / "scripts" / "_setup.sh")
    for name in ("requirements.txt", "requirements-nodeps.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    _executable(venv_bin / "python", "#!/bin/sh\nexit 0\n")
    _executable(venv_bin / "pip", FAKE_PIP)
    tools = tmp_path / "tools"  # the system packages present: no apt-get in this test
    tools.mkdir()
    for name in ("espeak-ng", "flite", "redis-server", "dot"):
        _executable(tools / name, "#!/bin/sh\nexit 0\n")
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"}
    env.pop("INSTALL_DEV", None)
    env.pop("VOICEAGENT_BROWSER_TESTS", None)
    done = subprocess.run(
        ["bash", "scripts/_setup.sh"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "==> installing Python packages (requirements.txt" in out
    assert "Collecting fake-package==1.0 (install --disable-pip-version-check --progress-bar on" in out
    assert "-r requirements.txt)" in out and "--no-deps -r requirements-nodeps.txt)" in out
    assert "==> installing data-only packages without their dependencies" in out
    assert out.count("    done in ") == 2
    # the second run only checks: nothing installed, nothing said
    again = subprocess.run(
        ["bash", "scripts/_setup.sh"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0 and again.stdout == ""
