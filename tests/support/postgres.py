"""The PostgreSQL server the suite runs on (``scripts/test`` starts one when none answers), and a
fresh database for each deployment, copied from one migrated once per set of migrations.

``TEST_POSTGRES_URL`` names the server (a superuser: databases are created and dropped); by
default ``postgresql://postgres@127.0.0.1:5432/postgres``, trust authentication, as
``scripts/_postgres.sh`` and the CI machines set it up. A database the suite creates is named
``va_<purpose>_<hex>`` and dropped when its deployment stops; the migrated template is
``va_tmpl_<migrations key>`` (``CREATE DATABASE ... TEMPLATE`` copies it in well under a second, a
migrate costs seconds of CPU).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql
from servers import migrations_key, run_migrate

SERVER_URL = os.environ.get("TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
_LOCK_KEY = 0x766F6963  # pg_advisory_lock: one pytest worker builds the template, the others wait
_NAME = re.compile(r"^[a-z0-9_]{1,63}$")


class PostgresMissing(RuntimeError):
    """No PostgreSQL answers at ``TEST_POSTGRES_URL``."""


def _connect() -> psycopg.Connection:
    try:
        return psycopg.connect(SERVER_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        raise PostgresMissing(
            f"no PostgreSQL at {_safe(SERVER_URL)} ({exc}): scripts/test starts one, "
            "or set TEST_POSTGRES_URL to a superuser's URL"
        ) from None


def _safe(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}@{host}:{parts.port or 5432}"))


def via(url: str, port: int, host: str = "127.0.0.1") -> str:
    """``url`` reached at ``host:port`` instead (a fault proxy in front of the server)."""
    parts = urlsplit(url)
    user = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}:{port}" if user else f"{host}:{port}"))


def url_for(database: str) -> str:
    """``SERVER_URL`` pointing at ``database``."""
    return urlunsplit(urlsplit(SERVER_URL)._replace(path=f"/{database}"))


def _clean_environ() -> dict[str, str]:
    skip = ("CACHE_", "DATABASE_", "MCP_", "APPCONFIG")
    return {k: v for k, v in os.environ.items() if not k.startswith(skip)}


def _exists(conn: psycopg.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def template() -> str:
    """The migrated template database's name; migrated here the first time (under a lock)."""
    name = f"va_tmpl_{migrations_key()}"
    with _connect() as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
        try:
            if not _exists(conn, name):
                build = f"{name}_build"
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(build)))
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(build)))
                run_migrate({**_clean_environ(), "DATABASE_URL": url_for(build)})
                rename = sql.SQL("ALTER DATABASE {} RENAME TO {}")
                conn.execute(rename.format(sql.Identifier(build), sql.Identifier(name)))
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
    return name


def empty_database(purpose: str) -> str:
    """A new, empty database's URL (for a migrate from zero)."""
    return _create(purpose, None)


def fresh_database(purpose: str) -> str:
    """A new database holding every migration (a copy of :func:`template`); its URL."""
    return _create(purpose, template())


def _create(purpose: str, from_template: str | None) -> str:
    name = f"va_{purpose}_{secrets.token_hex(4)}"
    assert _NAME.match(name), name
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if from_template:
        statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(from_template))
    with _connect() as conn:
        conn.execute(statement)
    return url_for(name)


@contextlib.contextmanager
def temporary(purpose: str, migrated: bool = True) -> Iterator[str]:
    """A new database's URL for the block (every migration applied, or empty), dropped after."""
    url = fresh_database(purpose) if migrated else empty_database(purpose)
    try:
        yield url
    finally:
        drop(url)


def drop(url: str) -> None:
    """Drop the database ``url`` names, its connections closed (a stopped server may leave some)."""
    name = urlsplit(url).path.lstrip("/")
    if not name.startswith("va_"):
        raise ValueError(f"not a database of the suite: {name}")
    with _connect() as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
