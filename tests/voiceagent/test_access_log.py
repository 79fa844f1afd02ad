"""Secrets masked in the servers' own lines: credential query parameters anywhere, uvicorn's access
and WebSocket records through its own formatters, daphne's access log (the real classes)."""

from __future__ import annotations

import io
import logging

import pytest
from daphne.access import AccessLogGenerator
from uvicorn.logging import AccessFormatter, DefaultFormatter

from voiceagent import access_log
from voiceagent.logging import mask_query, redact, register_secrets


@pytest.mark.parametrize(
    ("line", "masked"),
    [
        (
            "GET /api/v1/agents?api_key=va_abc123&session_id=s1",
            "GET /api/v1/agents?api_key=***&session_id=s1",
        ),
        ("/x?session_id=a&api%5Fkey=zzzzzz HTTP/1.1", "/x?session_id=a&api%5Fkey=*** HTTP/1.1"),
        ("/oauth/callback?code=c0de&state=st4te", "/oauth/callback?code=***&state=***"),
        (
            "/x?token=t&access_token=a&X-Amz-Signature=s&password=p",
            "/x?token=***&access_token=***&X-Amz-Signature=***&password=***",
        ),
        (
            '"WebSocket /api/v1/media/stream?jwt=eyJ.x.y&events=1"',
            '"WebSocket /api/v1/media/stream?jwt=***&events=1"',
        ),
    ],
)
def test_credential_query_parameters_are_masked(line, masked):
    assert mask_query(line) == masked
    assert redact(line) == masked


@pytest.mark.parametrize(
    "line",
    [
        "GET /?scenario=banking&events=1&page=2",
        "media stream closed with code=1008 and reason=x",  # not a query string
        "/x?token=&a=1",  # nothing to hide
    ],
)
def test_other_text_is_left_alone(line):
    assert mask_query(line) == line


def uvicorn_access_record(target: str) -> logging.LogRecord:
    """The record uvicorn's h11/httptools protocols log for one request."""
    return logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5555", "GET", target, "1.1", 401),
        None,
    )


def test_uvicorn_access_record_keeps_its_shape_for_uvicorns_formatter():
    register_secrets(["configured-key-123456"])
    record = uvicorn_access_record("/api/v1/agents?api_key=stored-key-999&x=configured-key-123456")
    assert access_log.ServerLineFilter().filter(record)
    line = AccessFormatter(
        fmt='%(client_addr)s - "%(request_line)s" %(status_code)s', use_colors=False
    ).format(record)
    assert line == '127.0.0.1:5555 - "GET /api/v1/agents?api_key=***&x=*** HTTP/1.1" 401 Unauthorized'


def test_uvicorn_websocket_line_is_masked_through_the_installed_logger_filter():
    access_log.install()
    access_log.install()  # idempotent
    logger = logging.getLogger("uvicorn.error")
    assert sum(isinstance(f, access_log.ServerLineFilter) for f in logger.filters) == 1
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(DefaultFormatter("%(message)s", use_colors=False))
    logger.addHandler(handler)
    # setLevel, not ``.level =``: the logger caches isEnabledFor per level, and an earlier test in
    # this process may have left INFO cached as off; a dictConfig run by one (disable_existing_loggers)
    # may have disabled the logger: uvicorn's own configuration enables it
    old_level, old_disabled = logger.level, logger.disabled
    logger.setLevel(logging.INFO)
    logger.disabled = False
    try:
        logger.info(
            '%s - "WebSocket %s" [accepted]', "127.0.0.1:1", "/api/v1/browser/conversation?api_key=k-12345678"
        )
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        logger.disabled = old_disabled
    assert out.getvalue() == '127.0.0.1:1 - "WebSocket /api/v1/browser/conversation?api_key=***" [accepted]\n'


def test_daphne_access_log_is_masked():
    access_log.install()
    assert getattr(AccessLogGenerator, "_voiceagent_redacts", False)
    out = io.StringIO()
    log = AccessLogGenerator(out)
    log(
        "http",
        "complete",
        {
            "path": "/api/v1/agents?api_key=va_stored-key&session_id=s1",
            "status": 401,
            "method": "GET",
            "client": "127.0.0.1:2",
            "time_taken": 0.01,
            "size": 58,
        },
    )
    assert '"GET /api/v1/agents?api_key=***&session_id=s1" 401 58' in out.getvalue()
    assert "va_stored-key" not in out.getvalue()
