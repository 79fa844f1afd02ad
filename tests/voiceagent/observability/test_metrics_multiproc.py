"""Which directory the workers' metric files go to (prometheus-client multiprocess mode)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from voiceagent.observability import multiproc


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(multiproc.ENV, raising=False)


def test_one_process_has_no_directory(no_env):
    assert multiproc.configure(None) is None
    assert multiproc.ENV not in os.environ


def test_a_configured_directory_is_used_as_it_is(no_env, tmp_path):
    chosen = tmp_path / "prom"
    assert multiproc.configure(str(chosen)) == str(chosen)
    assert os.environ[multiproc.ENV] == str(chosen) and chosen.is_dir()


def test_workers_of_one_supervisor_share_a_fresh_directory(tmp_path):
    base = tmp_path / "voiceagent-metrics"
    first = multiproc.worker_directory(os.getpid(), base)
    assert first is not None and first.parent == base and first.name.startswith(f"{os.getpid()}-")
    assert multiproc.worker_directory(os.getpid(), base) == first  # the second worker: the same one


def test_directories_of_gone_supervisors_and_gauges_of_dead_workers_are_removed(tmp_path):
    base = tmp_path / "voiceagent-metrics"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = base / f"{gone.pid}-12345"  # a supervisor that has exited
    reused = base / f"{os.getpid()}-1"  # this pid, but another process's start time: a reused pid
    for directory in (stale, reused):
        directory.mkdir(parents=True)
        (directory / "counter_1.db").write_bytes(b"x")
    mine = base / multiproc._process_key(os.getpid())
    mine.mkdir()
    dead_gauge = mine / f"gauge_livesum_{gone.pid}.db"
    live_gauge = mine / f"gauge_livesum_{os.getpid()}.db"
    counter = mine / f"counter_{gone.pid}.db"  # what a dead worker counted still counts
    for path in (dead_gauge, live_gauge, counter):
        path.write_bytes(b"x")
    assert multiproc.worker_directory(os.getpid(), base) == mine
    assert not stale.exists() and not reused.exists()
    assert not dead_gauge.exists() and live_gauge.exists() and counter.exists()


def test_without_proc_a_running_supervisor_is_still_found(tmp_path, monkeypatch):
    monkeypatch.setattr(multiproc, "_PROC", tmp_path / "no-proc")  # macOS
    base = tmp_path / "voiceagent-metrics"
    assert multiproc.worker_directory(os.getpid(), base) == base / f"{os.getpid()}-0"
