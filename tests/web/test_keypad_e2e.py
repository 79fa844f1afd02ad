"""The web page's keypad in real headless Chromium against the real service on the offline providers:
the banking auth agent sends a one-time code, the caller types a wrong one (keyboard) and then the
right one (the keypad's buttons); the wrong one is refused, the right one verifies."""

from __future__ import annotations

import pytest
from test_browser_e2e import ARTIFACTS, launch, running_service

from agents_app.builtin_tools import expected_mfa_code

pytestmark = [pytest.mark.slow, pytest.mark.browser]
SESSION = "e2e-keypad-1"


def test_a_code_typed_on_the_page_keypad_is_verified(tmp_path):
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with running_service(tmp_path) as service, sync_playwright() as pw:
        browser = launch(pw)
        page = browser.new_page()
        try:
            # the demo caller of the session the page will use, made before it connects
            page.goto(service + "/")
            page.evaluate(f"localStorage.setItem('voiceagent.session', '{SESSION}')")
            made = page.request.post(
                f"{service}/api/v1/profiles/generate",
                data={"seed": 7, "scenario": "banking", "session_id": SESSION},
            )
            assert made.status == 201, made.text()
            code = expected_mfa_code(SESSION, made.json())
            wrong = "000000" if code != "000000" else "111111"
            page.reload()
            expect(page.locator("#scenario option[value=banking]")).to_have_count(1)
            page.select_option("#scenario", "banking")
            # as a caller does: the second line answers the auth agent, so it waits for the handoff
            # (typed at once, on a loaded machine it could reach the concierge still answering)
            page.locator("#text").fill("i lost my card")
            page.keyboard.press("Enter")
            expect(
                page.locator("#activity li.handoff").filter(has_text="concierge → auth_agent")
            ).to_have_count(1, timeout=40_000)
            page.locator("#text").fill("yes thats me")
            page.keyboard.press("Enter")
            agent = page.locator("#transcript li.agent")
            expect(agent.filter(has_text="type it on your keypad")).to_have_count(1, timeout=40_000)
            expect(page.locator("#session")).to_have_text(SESSION)

            # keyboard: the digits typed into the keypad's field, Enter sends them
            page.get_by_label("Keypad", exact=True).focus()
            page.keyboard.type(wrong)
            page.keyboard.press("Enter")
            expect(page.locator("#keypad-sent")).to_have_text(f"Sent: {wrong}#")
            expect(
                page.locator("#transcript li.user").filter(has_text=f"Keypad entry: {wrong}")
            ).to_have_count(1)
            expect(agent.filter(has_text="doesn't match. Please type it again.")).to_have_count(
                1, timeout=15_000
            )

            # the keypad's buttons (Tab reaches them; clicking is pressing), "#" sends
            for digit in code:
                page.get_by_role("group", name="Keys").get_by_role("button", name=digit, exact=True).click()
            expect(page.get_by_label("Keypad", exact=True)).to_have_value(code)
            page.get_by_role("button", name="# (send)").click()
            expect(page.locator("#keypad-sent")).to_have_text(f"Sent: {code}#")
            expect(
                page.locator("#transcript li.user").filter(has_text=f"Keypad entry: {code}")
            ).to_have_count(1)
            expect(
                page.locator("#activity li.handoff").filter(has_text="auth_agent → cards_agent")
            ).to_have_count(1, timeout=15_000)
            expect(agent.filter(has_text="you're verified")).to_have_count(1)
            stored = page.request.get(f"{service}/api/v1/sessions/{SESSION}").json()
            assert stored["memory"]["authenticated"] is True
            page.screenshot(path=str(ARTIFACTS / "keypad.png"), full_page=True)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "keypad-failure.png"), full_page=True)
            raise
        finally:
            browser.close()
