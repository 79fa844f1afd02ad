"""Speech pool use in the metrics: the gauges follow leases, a refusal is counted once."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from voiceagent.observability import metrics
from voiceagent.speech.pools import POOLS, ClientPool, PoolTimeout


def value(name: str, pool: str) -> float:
    return REGISTRY.get_sample_value(name, {"pool": pool}) or 0.0


@pytest.fixture
def tts_pool():
    pool = ClientPool("tts", factory=object, size=1, provider="test", acquire_timeout=0.01, max_size=1)
    saved = POOLS.get("tts")
    POOLS["tts"] = pool
    yield pool
    if saved is None:
        POOLS.pop("tts", None)
    else:
        POOLS["tts"] = saved


async def test_pool_use_and_refusals_are_sampled(tts_pool):
    await tts_pool.warm()
    metrics.sample_pools()
    refused_before = value("voiceagent_pool_refusals_total", "tts")
    assert value("voiceagent_pool_clients_warm", "tts") == 1
    client = await tts_pool.acquire()
    with pytest.raises(PoolTimeout):
        await tts_pool.acquire()
    metrics.sample_pools()
    assert value("voiceagent_pool_clients_in_use", "tts") == 1
    assert value("voiceagent_pool_clients_warm", "tts") == 0
    assert value("voiceagent_pool_refusals_total", "tts") - refused_before == 1
    await tts_pool.release(client)
    metrics.sample_pools()  # a second sample does not count the refusal again
    assert value("voiceagent_pool_clients_in_use", "tts") == 0
    assert value("voiceagent_pool_refusals_total", "tts") - refused_before == 1
