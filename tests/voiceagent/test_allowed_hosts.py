"""ALLOWED_HOSTS holds on both HTTP stacks (issue 31, point 5): the lean API stack answered any
Host (``GET /api/v1/agents`` with ``Host: evil.example`` was 200), and where Django refused a Host
it logged ``django.security.DisallowedHost`` at ERROR with a traceback any anonymous client could
cause. Now: 400 ``{"detail"}`` and one WARNING line; the probes answer whatever the Host."""

from __future__ import annotations

import logging

import httpx
import pytest
from django.core.handlers.asgi import ASGIHandler

from voiceagent.handlers import ApiASGIHandler, PathRouter
from voiceagent.middleware import BAD_HOST_DETAIL

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def served(settings):
    """The two stacks as voiceagent/asgi.py routes them, in process."""
    settings.ALLOWED_HOSTS = ["voice.example.com"]
    app = PathRouter(ApiASGIHandler(), ASGIHandler())
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://voice.example.com")


@pytest.mark.parametrize(
    "path", ["/api/v1/agents", "/api/v1/scenarios", "/", "/dashboard", "/admin/", "/metrics"]
)
async def test_a_foreign_host_is_a_400_detail_and_one_warning(served, path, caplog):
    with caplog.at_level(logging.INFO):
        response = await served.get(path, headers={"Host": "evil.example"})
    assert response.status_code == 400 and response.json() == {"detail": BAD_HOST_DETAIL}
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert warnings[0].levelno == logging.WARNING and not warnings[0].exc_info
    assert "evil.example" in warnings[0].getMessage()


async def test_the_own_host_is_served(served):
    response = await served.get("/api/v1/agents")
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("path", ["/api/v1/ready", "/api/v1/readiness"])
async def test_probes_answer_whatever_the_host(served, path):
    response = await served.get(path, headers={"Host": "10.1.2.3:8000"})  # a kubelet probing the pod
    assert response.status_code in (200, 503) and "status" in response.json()
