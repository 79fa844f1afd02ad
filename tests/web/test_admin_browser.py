"""The operator's admin in real headless Chromium against the real service (one server for the
module): the tool picker's filter and an error on its field, the scenario's picture, history
times as dates, and "Run agent tests" answering at once and then following the run."""

from __future__ import annotations

import re
import subprocess

import pytest
from servers import PYTHON, ROOT, base_env
from test_browser_e2e import ARTIFACTS, admin_login, launch, running_service

pytestmark = [pytest.mark.slow, pytest.mark.browser]
OUT = ARTIFACTS / "admin"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(service url, its folder): one service and one staff user for every test here."""
    tmp = tmp_path_factory.mktemp("admin-browser")
    with running_service(tmp) as url:
        yield url, tmp


@pytest.fixture(scope="module")
def browser(served):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = launch(pw)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def staff(served, browser):
    """A page logged into the admin (the user is made once)."""
    url, tmp = served
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    admin_login(page, url, tmp, "/admin/")
    OUT.mkdir(parents=True, exist_ok=True)
    yield page
    context.close()


def test_tools_are_picked_filtered_and_errors_sit_on_their_field(served, staff):
    from playwright.sync_api import expect

    url, _ = served
    page = staff
    page.goto(f"{url}/admin/agents_app/agent/")
    page.get_by_role("link", name="concierge", exact=True).click()
    picker = page.locator(".tool-picker")
    expect(picker.locator("legend", has_text="Built-in tools")).to_be_visible()
    expect(picker.locator("legend", has_text="Handoffs")).to_be_visible()
    page.get_by_label("Filter tools").fill("one-time code")
    expect(picker.locator(".tool-option:visible", has_text="send_mfa_code")).to_have_count(1)
    expect(picker.locator(".tool-option", has_text="block_card")).to_be_hidden()
    expect(picker.locator(".tool-option", has_text="end_conversation")).to_be_visible()  # ticked: stays
    page.screenshot(path=str(OUT / "tool-picker.png"), full_page=True)
    page.get_by_label("Filter tools").fill("")
    picker.locator('input[value="send_mfa_code"]').check()
    page.locator("input[name=temperature]").fill("7")
    page.get_by_role("button", name="Save", exact=True).click()
    row = page.locator(".form-row.field-temperature")
    expect(row.locator(".errorlist")).to_contain_text("less than or equal to 2")
    expect(page.locator(".errornote")).to_be_visible()
    expect(picker.locator('input[value="send_mfa_code"]')).to_be_checked()  # the choice is kept


def test_the_scenario_picture_is_drawn_on_its_page(served, staff):
    from playwright.sync_api import expect

    url, _ = served
    page = staff
    page.goto(f"{url}/admin/agents_app/scenario/")
    page.get_by_role("link", name="banking", exact=True).click()
    svg = page.locator("#scenario-graph svg")
    expect(svg).to_be_visible()
    box = svg.bounding_box()
    assert box and box["width"] > 300 and box["height"] > 100
    texts = [t.strip() for t in svg.locator("text").all_text_contents()]
    assert "start agent" in texts and "handoff_auth_agent" in texts and "discrete" in texts
    expect(page.locator('select[name="start_agent"]')).to_have_value("concierge")
    page.locator("#scenario-graph").screenshot(path=str(OUT / "scenario-picture.png"))
    answer = page.request.get(f"{url}/api/v1/scenarios/banking/graph.svg")
    assert answer.status == 200 and answer.headers["content-type"] == "image/svg+xml"


def test_history_times_are_dates(served, staff):
    """A conversation made with ``manage.py talk`` on the service's database, read in the admin."""
    from playwright.sync_api import expect

    url, tmp = served
    done = subprocess.run(
        [PYTHON, "manage.py", "talk", "--scenario", "banking"],
        input="I lost my card\n",
        cwd=ROOT,
        env=base_env(tmp),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    session = re.search(r"stored as session (talk-[0-9a-f]+)", done.stdout).group(1)
    page = staff
    page.goto(f"{url}/admin/agents_app/session/{session}/change/")
    times = page.locator(".field-turn_time")
    expect(times.first).to_have_text(re.compile(r"^\s*\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3} UTC\s*$"))
    body = page.locator("#content").inner_text()
    assert not re.search(r"\b1[78]\d{8}\.\d+\b", body)  # no epoch seconds anywhere on the page
    viewer = page.locator("#conversation-viewer")
    expect(viewer.locator("li time.at").first).to_have_text(re.compile(r"^\d{2}:\d{2}:\d{2}$"))
    assert "speech to text 0" not in viewer.inner_text()  # typed turns: no speech stage drawn
    page.screenshot(path=str(OUT / "session-dates.png"), full_page=True)


@pytest.mark.timeout(600)
def test_run_agent_tests_answers_at_once_and_follows_the_run(served, staff):
    from playwright.sync_api import expect

    url, _ = served
    page = staff
    page.goto(f"{url}/admin/agents_app/scenario/")
    page.locator("tr", has=page.get_by_role("link", name="default", exact=True)).locator(
        "input.action-select"
    ).check()
    page.select_option("select[name=action]", "run_agent_tests")
    with page.expect_navigation(timeout=10_000):
        page.get_by_role("button", name="Go").click()  # answered at once: no request waits for the tests
    assert re.search(r"/admin/agents_app/scenario/tests/[0-9a-f]{32}/$", page.url)
    report = page.locator("#agent-tests")
    expect(report).to_have_attribute("data-done", "true", timeout=480_000)  # the page reloads itself
    expect(report.locator(".summary")).to_contain_text("passed, 0 failed, 0 errors")
    expect(report.locator('[data-status="passed"]')).not_to_have_count(0)
    page.screenshot(path=str(OUT / "agent-tests.png"), full_page=True)
