"""What a server checks before it serves: configuration that settings alone cannot judge.

Settings refuse a bad environment (:class:`voiceagent.config.ConfigError`) for every process,
``manage.py`` commands included. Some refusals belong to the server only: production with no
API key at all would answer 401 to every request, yet ``manage.py create_api_key`` and
``migrate`` must still run in that very environment to fix it. :func:`refuse_to_serve` is
called by ``voiceagent/asgi.py`` and ends the process with one ``configuration error:`` line.

Exit status 3 is uvicorn's ``STARTUP_FAILURE``: its ``--workers`` supervisor stops instead of
restarting a worker that would fail the same way forever (with any other status it restarts it
in a loop); daphne just exits.
"""

from __future__ import annotations

import logging
import sys
import threading

from django.conf import settings

logger = logging.getLogger("voiceagent.preflight")

STARTUP_FAILURE = 3
DB_TIMEOUT_S = 10.0
NO_API_KEY = (
    "API_KEYS is required when ENVIRONMENT=production: set it, or store a key first with "
    "`manage.py create_api_key <name>` (without a key every request would be refused)"
)


def _stored_keys_exist() -> bool | None:
    """Whether an active key is stored; None when the database cannot tell (down, not migrated)."""
    from django.db import DatabaseError, connections

    from voiceagent.models import ApiKey

    try:
        return ApiKey.objects.filter(revoked=False).exists()
    except DatabaseError as exc:
        logger.warning(
            "cannot read the stored API keys (%s); starting anyway: requests without a valid key "
            "are refused, and /readiness reports auth_configuration",
            str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__,
        )
        return None
    finally:
        connections.close_all()


def stored_keys_exist(timeout: float = DB_TIMEOUT_S) -> bool | None:
    """:func:`_stored_keys_exist` on its own thread: uvicorn imports the app inside its event
    loop, where Django refuses synchronous ORM calls; a database that hangs counts as unknown."""
    result: list[bool | None] = [None]

    def run() -> None:
        result[0] = _stored_keys_exist()

    worker = threading.Thread(target=run, name="preflight-api-keys", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        logger.warning("the stored API keys did not answer in %.0f s; starting anyway", timeout)
        return None
    return result[0]


def problems() -> list[str]:
    """One line per reason this process must not serve (empty: serve).

    Production needs some API key. Keys in ``API_KEYS`` settle it; otherwise a key stored in the
    database does. A database that cannot be read (unreachable, tables not created yet) is not
    proof that no key exists: the server starts, fail-closed, rather than wrongly refusing.
    """
    found: list[str] = []
    if settings.PRODUCTION and not settings.CONFIG.API_KEYS and stored_keys_exist() is False:
        found.append(NO_API_KEY)
    return found


def refuse_to_serve() -> None:
    """Exit with one ``configuration error:`` line (the first problem) when :func:`problems`."""
    found = problems()
    if found:
        sys.stderr.write(f"configuration error: {found[0]}\n")
        sys.stderr.flush()
        raise SystemExit(STARTUP_FAILURE)
