"""Every worker of a scale-out deployment loads the definition files into the shared database when
it starts (step 5). On PostgreSQL two workers starting together both found no row for an agent and
both inserted it: one failed with ``agent_name_ci_unique`` and served no agents (the acceptance
suite's ``uvicorn --workers 2`` on PostgreSQL logged it). Here four processes sync at the same
instant, on a fresh PostgreSQL database."""

from __future__ import annotations

import os
import subprocess
import time

import postgres
import pytest
from servers import PYTHON, ROOT

pytestmark = pytest.mark.slow
PROCESSES = 4
SYNC = """
import sys, time
import django
django.setup()
from agents_app.catalog import sync_files
time.sleep(max(0.0, float(sys.argv[1]) - time.time()))  # every process at the same instant
result = sync_files()
print(len(result.agents), len(result.scenarios))
"""


@pytest.fixture
def database():
    with postgres.temporary("catalog", migrated=True) as url:
        yield url


def test_workers_starting_together_all_load_the_definitions(database):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CACHE_", "DATABASE_", "MCP_"))}
    env.update(DATABASE_URL=database, DJANGO_SETTINGS_MODULE="voiceagent.settings", LOG_LEVEL="WARNING")
    at = time.time() + 12  # after every interpreter has imported Django (2 cores, others busy)
    procs = [
        subprocess.Popen(
            [PYTHON, "-c", SYNC, str(at)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    outcomes = [p.communicate(timeout=120) for p in procs]
    late = time.time() - at
    failed = [err[-1500:] for p, (_, err) in zip(procs, outcomes, strict=True) if p.returncode != 0]
    assert not failed, f"{len(failed)} of {PROCESSES} workers failed to load the definitions:\n" + failed[0]
    counts = {out.split()[0] for out, _ in outcomes}
    assert len(counts) == 1 and int(counts.pop()) > 0
    assert late < 60
