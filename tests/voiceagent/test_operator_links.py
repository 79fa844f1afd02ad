"""The operator's pages lead to each other and carry the service's icon: the dashboard and the talk
page link to the admin, every admin page links to the dashboard, and /favicon.ico is the icon."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.staticfiles import finders


@pytest.fixture
def staff(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("ops", "ops@example.com", "pw-123456-xyz"))
    return client


@pytest.mark.parametrize("path", ["/", "/dashboard"])
def test_pages_link_to_the_admin_and_carry_the_icon(client, db, path):
    html = client.get(path).content.decode()
    assert '<a href="/admin/">Admin</a>' in html
    assert 'rel="icon" href="/static/voiceagent/favicon.svg"' in html


def test_admin_pages_link_to_the_dashboard_and_carry_the_icon(staff):
    for path in ("/admin/", "/admin/agents_app/scenario/", "/admin/agents_app/session/"):
        html = staff.get(path).content.decode()
        assert '<a href="/dashboard" id="dashboard-link">Live dashboard</a>' in html, path
        assert 'rel="icon" href="/static/voiceagent/favicon.svg"' in html, path


def test_favicon_ico_is_the_icon(client, db):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == "/static/voiceagent/favicon.svg"
    icon = finders.find("voiceagent/favicon.svg")
    assert icon and Path(icon).read_text().startswith("<svg xmlns=")
