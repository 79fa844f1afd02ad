"""Fixtures of the acceptance suite: the peers (once per session) and the service deployed twice -
``scripts/run`` (daphne) and uvicorn with two workers on Redis - configured with the module's
``SERVER_ENV`` on top of what points it at the peers.

Modules whose ``SERVER_ENV`` agree share one deployment of each kind for the run
(:class:`DeploymentPool`): it is started for the first of them, lent to one module at a time (each
module's log checks read its own part of the log) and stopped by the last. ``scripts/test`` keeps
the whole suite on one pytest worker (``xdist_group``, tests/conftest.py), where the peers the
deployments point at live, so "the run" is every acceptance module."""

from __future__ import annotations

import secrets
from collections import Counter

import pytest
from deployments import RUN, SHARED_REDIS_DB, UVICORN, Deployment, incidents, start
from hostile import Bystander
from peers import Peers

KINDS = [pytest.param(RUN, id="run"), pytest.param(UVICORN, id="uvicorn2", marks=pytest.mark.redis)]


def _key(kind: str, module) -> tuple:
    return kind, tuple(sorted(getattr(module, "SERVER_ENV", {}).items()))


class DeploymentPool:
    """Deployments keyed by kind and ``SERVER_ENV``, lent to the modules of this session that want
    them. ``wanted`` counts, per key, the modules still to be lent it: while it is above zero the
    deployment outlives its current module (``Deployment.stop`` keeps it running)."""

    def __init__(self, peers: Peers, wanted: Counter, tmp_path_factory) -> None:
        self._peers = peers
        self._wanted = wanted
        self._tmp = tmp_path_factory
        self._live: dict[tuple, Deployment] = {}

    def lend(self, kind: str, module) -> Deployment:
        key = _key(kind, module)
        self._wanted[key] = max(0, self._wanted[key] - 1)
        deployment = self._live.get(key)
        if deployment is None or deployment.stopped:
            env = {"LOG_LEVEL": "INFO", **self._peers.env(), **getattr(module, "SERVER_ENV", {})}
            root = self._tmp.mktemp(f"acceptance-{kind.replace('/', '-')}")
            shared = self._wanted[key] > 0
            deployment = start(
                kind,
                root,
                env,
                api_key=f"acc-{secrets.token_hex(16)}",
                **({"redis_db": SHARED_REDIS_DB} if shared else {}),
            )
            self._live[key] = deployment
        deployment.log_start = len(deployment.log.read_text(errors="replace"))
        deployment.later_users = self._wanted[key]
        return deployment

    def close(self) -> list[str]:
        """Stop what is still running (a module left out of this run by ``-k`` or a worker that
        did not get it): the incidents of the shutdowns that no module's check saw."""
        found = []
        for deployment in self._live.values():
            if not deployment.stopped:
                deployment.later_users = 0
                deployment.stop()
                found += [f"{deployment.kind}: {line}" for line in incidents(deployment.log_text())]
        return found


@pytest.fixture(scope="session")
def peers():
    started = Peers()
    try:
        yield started
    finally:
        started.close()


@pytest.fixture(scope="session")
def deployment_pool(request, peers, tmp_path_factory):
    wanted: Counter = Counter()
    for module in {item.module for item in request.session.items if "deployment" in item.fixturenames}:
        for kind in (RUN, UVICORN):
            wanted[_key(kind, module)] += 1
    pool = DeploymentPool(peers, wanted, tmp_path_factory)
    yield pool
    left = pool.close()
    assert not left, "shut down after the last module's check, with errors:\n" + "\n".join(left[:20])


@pytest.fixture(scope="module", params=KINDS)
def deployment(request, deployment_pool: DeploymentPool) -> Deployment:
    """The service as deployed by ``request.param``, lent to this module; stopped after it unless
    a later module of the run wants the same settings."""
    lent = deployment_pool.lend(request.param, request.module)
    try:
        yield lent
    finally:
        lent.stop()


@pytest.fixture
def bystander(deployment: Deployment):
    """Another caller's browser conversation, open for the whole test (hostile.Bystander)."""
    caller = Bystander(f"{deployment.ws}/browser/conversation?api_key={deployment.api_key}")
    try:
        yield caller
    finally:
        caller.close()
