"""The Scenario admin's "Run agent tests" action, as a staff user uses it: the action answers at
once with a page that follows the run (the selected scenario's built-in suite, in the background
on the in-process engine), then shows each test's outcome, the failing expectation and the
transcript; a handoff broken through the admin shows up there as a failure."""

from __future__ import annotations

import time

import pytest
from django.urls import reverse

from agents_app.evals.spec import DEFAULT_DIR, load_suites

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
CHANGELIST = "admin:agents_app_scenario_changelist"


@pytest.fixture
def staff(client, loaded):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_superuser("evals-admin", "evals@example.com", "pw-evals-1")
    client.force_login(user)
    return client


def run_action(client, *names: str):
    """The action (a redirect at once), the run waited for, then its page."""
    from agents_app import eval_jobs
    from agents_app.models import Scenario

    picked = [Scenario.objects.get(name=name).pk for name in names]
    started = time.monotonic()
    response = client.post(reverse(CHANGELIST), {"action": "run_agent_tests", "_selected_action": picked})
    assert response.status_code == 302 and time.monotonic() - started < 5  # no waiting for the tests
    job_id = response["Location"].rstrip("/").rsplit("/", 1)[-1]
    assert eval_jobs.wait(job_id, 500)
    return client.get(response["Location"])


def default_tests() -> list[str]:
    return [t.name for t in load_suites([DEFAULT_DIR]) if t.scenario == "default"]


@pytest.mark.timeout(600)
def test_the_action_runs_the_scenarios_suite_and_shows_every_test_passed(staff):
    response = run_action(staff, "default")
    assert response.status_code == 200
    assert "admin/evals_report.html" in [t.name for t in response.templates]
    results = response.context["results"]
    assert [r["test"]["name"] for r in results] == default_tests()  # the default suite only, not banking's
    assert {r["status"] for r in results} == {"passed"}, [(r["test"]["name"], r["failures"]) for r in results]
    html = response.content.decode()
    assert f"{len(results)} passed, 0 failed, 0 errors, 0 skipped" in html
    assert html.count('data-status="passed"') == len(results)
    assert "the specialist is brought in for a detailed question and hands back" in html
    assert "assistant &rarr; specialist (announced)" in html  # the transcript table
    assert "judge skipped" in html  # offline: the judge expectation is a note, not a failure


@pytest.mark.timeout(600)
def test_a_handoff_broken_in_the_admin_fails_naming_the_handoff_with_the_transcript(staff):
    """The operator turns the specialist's hand-back into an announced one (an override of the
    file scenario, as the admin's inline saves it); the suite's first test now fails on it."""
    from agents_app.catalog import catalog
    from agents_app.models import Scenario, ScenarioHandoff

    scenario = Scenario.objects.get(name="default")
    edge = ScenarioHandoff.objects.get(scenario=scenario, from_agent="specialist", to_agent="assistant")
    edge.type = "announced"
    edge.save()
    scenario.overrides["handoffs"] = True
    scenario.save(update_fields=["overrides"])
    catalog.bump()
    catalog.reload()

    response = run_action(staff, "default")
    assert response.status_code == 200
    results = {r["test"]["name"]: r for r in response.context["results"]}
    broken = results["the specialist is brought in for a detailed question and hands back"]
    assert broken["status"] == "failed"
    failure = broken["failures"][0]
    assert failure["turn_index"] == 4 and failure["expectation"].startswith("handoff")
    assert "discrete" in failure["expected"] and "announced" in failure["actual"]
    html = response.content.decode()
    assert 'data-status="failed"' in html
    assert "turn 4: handoff" in html
    assert "[handoff specialist -&gt; assistant (announced)]" in html  # the failure's transcript
    assert not response.context["ok"]


def test_a_scenario_without_a_suite_says_so(staff):
    from agents_app.models import Scenario

    Scenario.objects.create(name="untested", start_agent="assistant", agents=["assistant"], source="admin")
    response = run_action(staff, "untested")
    assert response.status_code == 200
    assert response.context["results"] == [] and response.context["not_run"] == []
    assert "no agent tests for this scenario" in response.content.decode()


def test_the_run_is_bounded_in_time_and_lists_what_did_not_finish(fake_runtime):
    """Cut off at once (on the scripted providers: nothing real is started and then abandoned)."""
    from agents_app.admin import run_agent_tests_for

    outcome = run_agent_tests_for(["default"], timeout_s=0.001)
    assert outcome["timed_out"] is True and not outcome["ok"]
    assert [t.split("::", 1)[1] for t in outcome["not_run"]] == default_tests()
