"""Shared fixtures. Redis-backed tests use the real server on 127.0.0.1:6379 (scripts/test starts it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SUPPORT = Path(__file__).parent / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))


@pytest.fixture
def api_client():
    from rest_framework.test import APIClient

    return APIClient(raise_request_exception=False)


@pytest.fixture(autouse=True)
def _fresh_process_state():
    """Module-level singletons (appconfig provider, key cache) start clean in every test."""
    from voiceagent import appconfig, auth

    appconfig.reset_for_tests()
    auth.reset_key_cache()
    yield
    appconfig.reset_for_tests()
    auth.reset_key_cache()
