"""numpy's OpenBLAS runs one thread per process in the service: its helper threads busy-wait ~0.1 s
after each matrix product (a third more CPU per Whisper decode on two cores, taken from the loop)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

# the process's own threads after importing the service's package and then numpy
_THREADS = (
    "import os, voiceagent, numpy; "
    "print(os.environ.get('OPENBLAS_NUM_THREADS'), len(os.listdir('/proc/self/task')))"
)


def _run(**env: str) -> tuple[str, int]:
    clean = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", _THREADS],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
    )
    value, threads = out.stdout.split()
    return value, int(threads)


@pytest.mark.skipif(
    (os.cpu_count() or 1) < 2 or not os.path.isdir("/proc/self/task"), reason="needs 2 cores, Linux"
)
def test_numpy_starts_no_blas_helper_threads_in_the_service():
    value, threads = _run()
    assert value == "1"
    assert threads == 1, f"{threads} threads after importing numpy: OpenBLAS started helpers"


def test_an_operators_own_blas_thread_count_wins():
    value, _ = _run(OPENBLAS_NUM_THREADS="2")
    assert value == "2"
