"""Structured logs: ids on every line, secrets masked."""

from __future__ import annotations

import json
import logging

from voiceagent.logging import (
    ContextFilter,
    JsonFormatter,
    TextFormatter,
    redact,
    register_secrets,
    request_id_var,
    session_id_var,
)


def make_record(msg, *args, exc_info=None):
    return logging.LogRecord("t", logging.INFO, __file__, 1, msg, args, exc_info)


def test_json_line_carries_ids_and_masks_secrets():
    register_secrets(["super-secret-api-key-1"])
    token_r, token_s = request_id_var.set("req-1"), session_id_var.set("sess-9")
    try:
        record = make_record(
            "calling with key %s and Authorization: Bearer abcdefghijklmnop", "super-secret-api-key-1"
        )
        assert ContextFilter().filter(record)
        line = JsonFormatter().format(record)
    finally:
        request_id_var.reset(token_r)
        session_id_var.reset(token_s)
    entry = json.loads(line)
    assert entry["request_id"] == "req-1" and entry["session_id"] == "sess-9"
    assert "super-secret-api-key-1" not in line and "abcdefghijklmnop" not in line
    assert entry["level"] == "INFO"


def test_exception_text_is_redacted():
    register_secrets(["hunter2-password"])
    try:
        raise ValueError("login failed for hunter2-password")
    except ValueError:
        import sys

        record = make_record("oops", exc_info=sys.exc_info())
    ContextFilter().filter(record)
    text = TextFormatter().format(record)
    assert "hunter2-password" not in text and "ValueError" in text


def test_redact_patterns():
    assert "abc123secret" not in redact('{"api_key": "abc123secret"}')
    assert "tok_ABCDEFGH" not in redact("refresh_token=tok_ABCDEFGH&x=1")
    assert redact("nothing to hide") == "nothing to hide"
