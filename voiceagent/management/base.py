"""The base class of every management command of the project: database problems become one line.

A command run on a database that was never migrated used to end in a traceback (``no such table``).
:class:`ProjectCommand` turns any database error a command meets into a :class:`CommandError` that
says what to do (``run `python manage.py migrate` first``, or ``check DATABASE_URL``): Django
prints it as one line on stderr and exits with status 1. ``--traceback`` still shows the cause.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

from voiceagent.logging import redact

__all__ = ["ProjectCommand", "database_advice"]

MIGRATE = "run `python manage.py migrate` first"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return redact(text[0]) if text else type(exc).__name__


def database_advice(exc: DatabaseError, alias: str = DEFAULT_DB_ALIAS) -> str:
    """One sentence for a database error: missing tables, missing migrations, or no database.

    Why a sentence and not the error: "no such table: voiceagent_apikey" tells a new user neither
    that the database was never migrated nor which command fixes it.
    """
    from django.db.migrations.executor import MigrationExecutor

    connection = connections[alias]
    try:
        tables = connection.introspection.table_names()
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as unreachable:
        return f"cannot use the database ({_first_line(unreachable)}): check DATABASE_URL"
    finally:
        connection.close()
    if not tables:
        return f"the database has no tables yet: {MIGRATE}"
    if pending:
        return f"the database lacks {len(pending)} migration(s) ({_first_line(exc)}): {MIGRATE}"
    return f"database error: {_first_line(exc)}"


class ProjectCommand(BaseCommand):
    """``BaseCommand`` whose database errors end as one actionable line and exit status 1.

    ``needs_database`` documents whether the command uses the database at all (a command that
    does not, like ``validate_agents``, still works on an unmigrated database).
    """

    needs_database = True

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except DatabaseError as exc:
            raise CommandError(database_advice(exc)) from exc
