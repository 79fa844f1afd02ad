"""Fixtures of the telephony tests: the local ACS peer and the service configured against it."""

import pytest
from acs_peer import AcsPeer, telephony_env

from calls.acs import reset_telephony_client
from voiceagent.config import load_config


@pytest.fixture(scope="module")
def peer():
    with AcsPeer() as p:
        yield p


@pytest.fixture
def catalog_loaded(db):
    """Agent and scenario definitions loaded; the cache (call map, sessions) clean."""
    from django.core.cache import cache

    from agents_app.catalog import catalog, sync_files

    cache.clear()
    sync_files()
    catalog.reload()
    yield
    cache.clear()


@pytest.fixture
def telephony(peer, catalog_loaded, settings):
    """Telephony configured against the peer through the environment variables production uses."""
    peer.reset()
    reset_telephony_client()
    settings.CONFIG = load_config(telephony_env(peer))
    yield peer
    reset_telephony_client()


@pytest.fixture
def live_runtime(fake_runtime):
    """The instant runtime with its realtime client on a local realtime peer (yielded)."""
    from realtime_peer import RealtimePeer

    from voiceagent.llm.realtime import OpenAIRealtimeClient

    with RealtimePeer(api_key="rt-key") as peer:
        client = OpenAIRealtimeClient(
            "gpt-realtime", api_key="rt-key", base_url=f"{peer.url}/v1", connect_timeout=3
        )
        fake_runtime.__dict__["_realtime_client"] = client
        yield peer
