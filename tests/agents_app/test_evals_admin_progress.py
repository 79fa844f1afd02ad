"""The "Run agent tests" page while a run goes on: progress from the shared cache, a page that
reloads itself, and a clear answer for a run that is unknown or expired."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.urls import reverse

from agents_app import eval_jobs

pytestmark = pytest.mark.django_db
JOB = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def staff(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("p", "p@example.com", "pw-123456-xyz"))
    return client


def page(client, job_id: str = JOB):
    return client.get(reverse("admin:agents_app_scenario_tests", args=[job_id]))


def test_a_running_job_shows_its_progress_and_reloads(staff):
    state = eval_jobs._new_state(JOB, ["banking"], 300.0)
    state.update(
        total=3, pending=["banking::b", "banking::c"], running={"id": "banking::b", "turn": 2, "of": 4}
    )
    state["results"] = [
        {
            "test": {"id": "banking::a", "suite": "banking", "name": "a", "scenario": "banking"},
            "status": "passed",
            "duration_s": 1.5,
            "session_id": "eval-1",
            "notes": [],
            "failures": [],
            "turns": [],
        }
    ]
    cache.set(eval_jobs._key(JOB), eval_jobs._summary(state), 60)
    response = page(staff)
    html = response.content.decode()
    assert response.status_code == 200
    assert '<meta http-equiv="refresh" content="2">' in html
    assert (
        "Running: 1 of 3 test(s) finished" in html
        and "now <strong>banking::b</strong>, turn 2 of 4 done" in html
    )
    assert '<progress max="3" value="1">' in html
    assert 'data-status="passed"' in html and 'data-done="false"' in html
    assert "passed, 0 failed" not in html  # no verdict before the end


def test_a_finished_job_shows_its_verdict_and_stops_reloading(staff):
    state = eval_jobs._new_state(JOB, ["banking"], 300.0)
    state.update(total=0, done=True)
    cache.set(eval_jobs._key(JOB), eval_jobs._summary(state), 60)
    html = page(staff).content.decode()
    assert 'http-equiv="refresh"' not in html and 'data-done="true"' in html
    assert "0 passed, 0 failed, 0 errors, 0 skipped" in html and "no agent tests for this scenario" in html


@pytest.mark.parametrize("job_id", ["ffffffffffffffffffffffffffffffff", "not-a-job", "..%2F..%2Fetc"])
def test_an_unknown_job_is_a_404_page(staff, job_id):
    response = page(staff, job_id)
    assert response.status_code == 404 and "unknown or expired" in response.content.decode()


def test_the_page_needs_staff(client):
    response = page(client)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
