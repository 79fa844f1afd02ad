"""Secrets out of the ASGI servers' own lines: the access log of daphne and of uvicorn.

Those lines never reach the project's log handler, so its :class:`~voiceagent.logging.ContextFilter`
never masks them, and they print the request target verbatim: a browser WebSocket opened with
``?api_key=<key>`` put the key in the log, whatever ``LOG_FORMAT``.

- **daphne** writes its access log itself (``AccessLogGenerator``, plain text to stdout or
  ``--access-log``): :func:`install` makes its ``write_entry`` redact the request line.
- **uvicorn** logs through ``uvicorn.access`` (HTTP requests) and ``uvicorn.error`` (the
  ``"WebSocket /path?query" [accepted]`` lines) with its own handlers and formatters, which read
  the record's arguments by position: :class:`ServerLineFilter` on those loggers redacts each
  string argument in place, so any formatter (uvicorn's, ``--log-config``'s) still works.

Masking is :func:`voiceagent.logging.redact`: configured secret values, credential-named query
parameters (``api_key``, ``token``, ``code``, ...) and bearer-looking strings.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any

from voiceagent.logging import redact

UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, int | float):
        return value  # keeps %d and %f working
    return redact(str(value))


class ServerLineFilter(logging.Filter):
    """Redact a server's record in place, keeping the shape of ``args`` (formatters unpack it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_clean(a) for a in record.args)
        elif isinstance(record.args, Mapping):
            record.args = {k: _clean(v) for k, v in record.args.items()}
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


def _install_uvicorn() -> None:
    for name in UVICORN_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, ServerLineFilter) for f in logger.filters):
            logger.addFilter(ServerLineFilter())


def _install_daphne() -> bool:
    module = sys.modules.get("daphne.access")
    if module is None:
        return False
    cls = module.AccessLogGenerator
    if getattr(cls, "_voiceagent_redacts", False):
        return True
    original = cls.write_entry

    def write_entry(self, host, date, request, *args: Any, **kwargs: Any) -> None:
        original(self, host, date, redact(str(request)), *args, **kwargs)

    cls.write_entry = write_entry
    cls._voiceagent_redacts = True
    return True


def install() -> None:
    """Mask secrets in daphne's and uvicorn's own lines (idempotent; cheap where one is absent).

    uvicorn's loggers get a filter whether uvicorn runs or not (a logger costs nothing); daphne's
    access log is patched only where daphne's CLI already imported it.
    """
    _install_uvicorn()
    _install_daphne()
