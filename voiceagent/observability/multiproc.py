"""Where the worker processes of one deployment keep their metric files, decided before
``prometheus_client`` is imported (it reads ``PROMETHEUS_MULTIPROC_DIR`` once, at its import).

Why: under ``uvicorn --workers N`` each worker counts its own conversations, and a scrape lands on
one of them. In prometheus-client's multiprocess mode every worker writes its figures to files in
one directory, and the worker that answers ``/metrics`` adds them all up.

- ``PROMETHEUS_MULTIPROC_DIR`` set (environment or ``.env``): used as it is; the operator empties
  it before each start, as prometheus-client asks (gunicorn and other process managers).
- unset, in a worker that uvicorn's supervisor spawned (a ``multiprocessing`` child):
  ``<temp dir>/voiceagent-metrics/<supervisor pid>-<its start time>``. A new start of the
  deployment gets a new, empty directory, so nothing stale is ever added; the directories of
  supervisors no longer running are removed, and the live gauges of a worker that died (uvicorn
  replaces it) are dropped, by each worker as it starts.
- unset, one process (daphne, ``uvicorn`` without ``--workers``, tests): no directory, the normal
  in-process registry.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shutil
import tempfile
from pathlib import Path

ENV = "PROMETHEUS_MULTIPROC_DIR"
_PROC = Path("/proc")
logger = logging.getLogger("voiceagent.observability.multiproc")


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, Linux), or None when it is not running.
    With the pid it names one process for good: a pid reused later has another start time."""
    if not _PROC.exists():  # no /proc (macOS): only whether the pid runs
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "0"
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22; the name in () may hold spaces


def _process_key(pid: int) -> str | None:
    start = _start_time(pid)
    return None if start is None else f"{pid}-{start}"


def _remove_stale(base: Path, keep: str) -> None:
    """Directories of supervisors that no longer run."""
    for entry in base.iterdir():
        pid, _, _ = entry.name.partition("-")
        if entry.name != keep and pid.isdigit() and _process_key(int(pid)) != entry.name:
            shutil.rmtree(entry, ignore_errors=True)


def _drop_dead_workers(directory: Path) -> None:
    """Live gauges (``gauge_livesum_<pid>.db``) of workers that died: their conversations are gone."""
    for path in directory.glob("gauge_live*_*.db"):
        pid = path.stem.rsplit("_", 1)[1]
        if pid.isdigit() and _start_time(int(pid)) is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def worker_directory(parent_pid: int, base: Path | None = None) -> Path | None:
    """The metric directory of the workers of supervisor ``parent_pid`` (made; stale ones
    removed), or None when that process cannot be identified."""
    key = _process_key(parent_pid)
    if key is None:
        return None
    base = base or Path(tempfile.gettempdir()) / "voiceagent-metrics"
    directory = base / key
    directory.mkdir(parents=True, exist_ok=True)
    _remove_stale(base, key)
    _drop_dead_workers(directory)
    return directory


def configure(configured: str | None) -> str | None:
    """Set ``PROMETHEUS_MULTIPROC_DIR`` for this process as the module docstring says; returns it
    (None: single-process registry). ``configured``: the setting from the environment or ``.env``."""
    configured = configured or os.environ.get(ENV)
    if configured:
        os.environ[ENV] = configured
        Path(configured).mkdir(parents=True, exist_ok=True)
        return configured
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid is None:
        return None
    directory = worker_directory(parent.pid)
    if directory is None:
        return None
    os.environ[ENV] = str(directory)
    logger.debug("metrics of this worker in %s", directory)
    return str(directory)
