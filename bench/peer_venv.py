"""A peer framework's own venv for the side-by-side benches (bench_vs_pipecat, bench_vs_peers_turn):
the peers are never dependencies of the service, so each lives in var/bench-venvs/<name>."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


def peer_python(venv: Path, package: str, version: str, requirements: Sequence[str]) -> Path:
    """The venv's python with ``package`` ``version`` installed from ``requirements``, made on
    first use (a venv holding another version is brought to this one)."""
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"creating {venv} ({package} {version})", file=sys.stderr)
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
    probe = f"import importlib.metadata as m; print(m.version({package!r}))"
    found = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    if found.stdout.strip() != version:
        print(f"installing {' '.join(requirements)} into {venv}", file=sys.stderr)
        pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements]
        subprocess.run(pip, check=True, stdout=sys.stderr)
    return python
