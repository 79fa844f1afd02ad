"""Every error under /api/v1 is JSON {"detail"}; a 500 says "internal error" and the request id only."""

from __future__ import annotations

import json
import logging

import pytest
from django.urls import include, path
from rest_framework.response import Response
from rest_framework.views import APIView

pytestmark = pytest.mark.django_db


class Boom(APIView):
    permission_classes: list = []

    def get(self, request):
        raise RuntimeError("db password is hunter2 and it broke")

    def post(self, request):
        return Response(request.data)


def plain_boom(request):
    raise KeyError("plain django view")


urlpatterns = [
    path("api/v1/boom", Boom.as_view()),
    path("api/v1/plain-boom", plain_boom),
    path("", include("voiceagent.urls")),
]
handler404 = "voiceagent.errors.json_404"
handler500 = "voiceagent.errors.json_500"


def test_unknown_path_is_json_404(api_client):
    response = api_client.get("/api/v1/no/such/thing")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/json")
    assert response.json() == {"detail": "Not found: /api/v1/no/such/thing"}


def test_wrong_method_is_json_405(api_client):
    response = api_client.delete("/api/v1/health")
    assert response.status_code == 405
    assert "detail" in response.json()


@pytest.mark.urls(__name__)
@pytest.mark.parametrize("url", ["/api/v1/boom", "/api/v1/plain-boom"])
def test_unhandled_exception_is_json_500_with_request_id(api_client, caplog, url):
    with caplog.at_level(logging.ERROR):
        response = api_client.get(url, HTTP_X_REQUEST_ID="req-42")
    assert response.status_code == 500
    body = response.json()
    assert body == {"detail": "internal error (request id req-42)", "request_id": "req-42"}
    assert response["X-Request-ID"] == "req-42"
    assert "hunter2" not in response.content.decode()
    assert any(getattr(r, "exc_info", None) or "unhandled" in r.getMessage() for r in caplog.records)


@pytest.mark.urls(__name__)
@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        ("{not json", "application/json", 400),
        ("<xml/>", "application/xml", 415),
        ("[1,2", "application/json", 400),
        ("[" * 200_000 + "]" * 200_000, "application/json", 400),  # RecursionError in the decoder
        ('{"a":' * 100_000 + "1" + "}" * 100_000, "application/json", 400),
    ],
)
def test_malformed_bodies(api_client, body, content_type, status):
    response = api_client.generic("POST", "/api/v1/boom", body, content_type=content_type)
    assert response.status_code == status
    assert set(response.json()) == {"detail"}


@pytest.mark.urls(__name__)
def test_oversized_body_is_4xx_json(api_client):
    response = api_client.generic(
        "POST", "/api/v1/boom", '{"a": "' + "x" * (2 * 1024 * 1024) + '"}', content_type="application/json"
    )
    assert 400 <= response.status_code < 500
    assert "detail" in response.json()


@pytest.mark.parametrize(
    ("method", "url"),
    [("POST", "/api/v1/agents"), ("POST", "/api/v1/mcp/servers"), ("POST", "/api/v1/profiles/generate")],
)
def test_deeply_nested_json_is_a_400_on_real_endpoints(api_client, method, url):
    response = api_client.generic(method, url, "[" * 100_000, content_type="application/json")
    assert response.status_code == 400
    assert "nested too deeply" in response.json()["detail"]


@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        # schemathesis's find on PostgreSQL: a JSON-typed field passed the NUL to jsonb, a 500
        ("PUT", "/api/v1/agents/cards_agent", {"turn_taking": {"goodbye": "bye\u0000"}}),
        ("POST", "/api/v1/profiles/generate", {"seed": 7, "locale\u0000": "en"}),  # in a key too
    ],
)
def test_a_nul_character_anywhere_in_a_body_is_a_400(api_client, db, method, url, body):
    response = api_client.generic(method, url, json.dumps(body), content_type="application/json")
    assert response.status_code == 400, response.content
    assert "NUL" in response.json()["detail"]


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("GET", "/api/v1/profiles/a%00b"),  # on PostgreSQL each of these was a 500
        ("DELETE", "/api/v1/mcp/servers/a%00b"),
        ("GET", "/api/v1/mcp/tools?server=x%00y"),
        ("GET", "/admin/agents_app/agent/?q=%00"),
    ],
)
def test_a_nul_character_in_a_url_is_a_400(api_client, db, method, url):
    response = api_client.generic(method, url)
    assert response.status_code == 400, response.content
    assert "NUL" in response.json()["detail"]


def test_request_id_generated_and_hostile_one_replaced(api_client):
    generated = api_client.get("/api/v1/health")["X-Request-ID"]
    assert len(generated) == 16
    hostile = api_client.get("/api/v1/health", HTTP_X_REQUEST_ID="a\nb<script>" + "x" * 100)["X-Request-ID"]
    assert "<" not in hostile and "\n" not in hostile and len(hostile) == 16
