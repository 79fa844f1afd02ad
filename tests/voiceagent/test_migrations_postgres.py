"""The migrations on PostgreSQL, the README's production database: every one applies to an empty
database and the models hold no change a migration does not (``makemigrations --check``). (Taking
each app back to zero and forward again was checked once, on 2026-11-29: 20 s more, left out of CI.)"""

from __future__ import annotations

import os
import subprocess

import postgres
import pytest
from servers import PYTHON, ROOT

pytestmark = pytest.mark.slow


def manage(url: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CACHE_", "DATABASE_", "MCP_"))}
    env.update(DATABASE_URL=url, DJANGO_SETTINGS_MODULE="voiceagent.settings", LOG_LEVEL="WARNING")
    return subprocess.run(
        [PYTHON, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def empty_database():
    with postgres.temporary("migrations", migrated=False) as url:
        yield url


def test_every_migration_applies_to_postgres_and_the_models_match(empty_database):
    done = manage(empty_database, "migrate", "--noinput", "-v0")
    assert done.returncode == 0, done.stderr[-3000:]
    check = manage(empty_database, "migrate", "--check")
    assert check.returncode == 0, f"migrations left unapplied:\n{check.stdout}{check.stderr}"

    changes = manage(empty_database, "makemigrations", "--check", "--dry-run")
    assert changes.returncode == 0, f"models changed without a migration:\n{changes.stdout}"
