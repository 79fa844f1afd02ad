"""Every management command of the project, run as a user runs it on a database never migrated.

The commands are found on disk (``*/management/commands/*.py``), so a new one is covered without
editing this file: it must derive from :class:`voiceagent.management.base.ProjectCommand`, and on a
fresh, empty SQLite database it must say what to do in one line (exit 1), never print a traceback.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
from servers import ROOT, base_env, free_port

from voiceagent.management.base import ProjectCommand

# arguments a command needs to get past argument parsing; anything else runs with none
ARGS = {
    "create_api_key": ["ci"],
    "generate_profile": ["--seed", "3"],
    "purge_recordings": ["--older-than", "30", "--dry-run"],
}


def project_commands() -> list[tuple[str, str]]:
    """(app, command) for every command module of the project's own apps."""
    found = []
    for path in sorted(ROOT.glob("*/management/commands/*.py")):
        if not path.name.startswith("_"):
            found.append((path.parts[-4], path.stem))
    return found


COMMANDS = project_commands()


def test_the_commands_are_found():
    names = {name for _, name in COMMANDS}
    assert {"generate_profile", "validate_agents", "create_api_key"} <= names


@pytest.mark.parametrize(("app", "name"), COMMANDS)
def test_every_command_uses_the_shared_base(app, name):
    module = importlib.import_module(f"{app}.management.commands.{name}")
    assert issubclass(module.Command, ProjectCommand), f"{name} must derive from ProjectCommand"


@pytest.mark.slow
@pytest.mark.parametrize(("app", "name"), COMMANDS)
def test_every_command_on_a_database_never_migrated(app, name, tmp_path):
    env = base_env(tmp_path)  # DATABASE_URL: a new SQLite file, no tables
    assert not (tmp_path / "db.sqlite3").exists()
    done = subprocess.run(
        [sys.executable, "manage.py", name, *ARGS.get(name, [])],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    module = importlib.import_module(f"{app}.management.commands.{name}")
    if not module.Command.needs_database:  # e.g. validate_agents checks files only
        assert done.returncode == 0, output
        return
    assert done.returncode == 1, output
    lines = done.stderr.strip().splitlines()
    assert lines == ["CommandError: the database has no tables yet: run `python manage.py migrate` first"], (
        output
    )


@pytest.mark.slow
def test_an_unreachable_database_names_the_setting_without_its_password(tmp_path):
    url = f"postgres://voice:hunter2-secret@127.0.0.1:{free_port()}/voice"  # nothing listens there
    done = subprocess.run(
        [sys.executable, "manage.py", "create_api_key", "ci"],
        cwd=ROOT,
        env=base_env(tmp_path, DATABASE_URL=url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in output, output
    assert (
        done.stderr.startswith("CommandError: cannot use the database (") and "check DATABASE_URL" in output
    )
    assert "hunter2" not in output
