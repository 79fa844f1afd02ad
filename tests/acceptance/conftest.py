"""Fixtures of the acceptance suite: the peers (once per session) and, per module, the service
deployed twice - ``scripts/run`` (daphne) and uvicorn with two workers on Redis - configured with
the module's ``SERVER_ENV`` on top of what points it at the peers."""

from __future__ import annotations

import secrets

import pytest
from deployments import RUN, UVICORN, Deployment, start
from hostile import Bystander
from peers import Peers


@pytest.fixture(scope="session")
def peers():
    started = Peers()
    try:
        yield started
    finally:
        started.close()


@pytest.fixture(
    scope="module",
    params=[pytest.param(RUN, id="run"), pytest.param(UVICORN, id="uvicorn2", marks=pytest.mark.redis)],
)
def deployment(request, peers, tmp_path_factory) -> Deployment:
    """The service as deployed by ``request.param``, started for this module and stopped after it."""
    env = {"LOG_LEVEL": "INFO", **peers.env(), **getattr(request.module, "SERVER_ENV", {})}
    root = tmp_path_factory.mktemp(f"acceptance-{request.param.replace('/', '-')}")
    started = start(request.param, root, env, api_key=f"acc-{secrets.token_hex(16)}")
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def bystander(deployment: Deployment):
    """Another caller's browser conversation, open for the whole test (hostile.Bystander)."""
    caller = Bystander(f"{deployment.ws}/browser/conversation?api_key={deployment.api_key}")
    try:
        yield caller
    finally:
        caller.close()
