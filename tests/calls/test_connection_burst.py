"""A burst of phone calls must cost bystanders nothing and every admitted call its session (issue 12, 7).

Timing lives in bench/bench_connection_burst.py; these tests pin down, without timing, what made a
burst of 300 media streams stall a bystander conversation and lose calls:

* the local-memory session cache held 300 entries (Django's default) and culled live sessions and
  call maps once ~150 calls were up;
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.core.cache import caches


def test_the_local_cache_keeps_a_session_and_a_call_map_for_every_admissible_conversation():
    if "locmem" not in settings.CACHES["default"]["BACKEND"]:
        pytest.skip("the local-memory cache is configured only without CACHE_HOST")
    config = settings.CONFIG
    live = config.BROWSER_MAX_CONNECTIONS + config.TELEPHONY_MAX_STREAMS + config.CONTACTCENTER_MAX_SESSIONS
    cache = caches.create_connection("default")  # a private instance of the configured cache
    keys = [f"burst-test:{kind}:{n}" for n in range(live) for kind in ("session", "call")]
    cache.set_many(dict.fromkeys(keys, {"state": "x" * 100}))
    kept = cache.get_many(keys)
    cache.delete_many(keys)
    assert len(kept) == len(keys), f"{len(keys) - len(kept)} of {len(keys)} entries culled"
