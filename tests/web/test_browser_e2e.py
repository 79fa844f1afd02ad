"""The web page in real headless Chromium (system package), driven by Playwright, with a fake
microphone playing a WAV spoken by espeak-ng, against the real service on the offline providers."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import wave
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from fault_proxy import FaultProxy
from servers import PYTHON, ROOT, SERVER_START_S, base_env, free_port, migrate, start, wait_http

pytestmark = [pytest.mark.slow, pytest.mark.browser]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts" / "browser"


def spoken_wav(path: Path, text: str, lead_s: float = 1.0, tail_s: float = 5.0) -> Path:
    raw = path.with_suffix(".raw.wav")
    subprocess.run(["espeak-ng", "-s", "160", "-w", str(raw), text], check=True)
    with wave.open(str(raw)) as src:
        params, frames = src.getparams(), src.readframes(src.getnframes())
    silence = lambda s: bytes(int(params.framerate * s) * params.sampwidth)  # noqa: E731
    with wave.open(str(path), "wb") as out:
        out.setparams(params)
        out.writeframes(silence(lead_s) + frames + silence(tail_s))
    return path


@contextmanager
def running_service(tmp_path: Path, server: str = "uvicorn", **extra: str):
    """The real service (uvicorn, or daphne as scripts/run serves it) on the offline providers;
    its log is kept in ARTIFACTS."""
    env = base_env(tmp_path, STT_POOL_SIZE="1", TTS_POOL_SIZE="2", LOG_LEVEL="INFO", **extra)
    migrate(env)
    port = free_port()
    proc = start(server, port, env, tmp_path / "server.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v1/ready", timeout=SERVER_START_S, status=200)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(20)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / "server.log", ARTIFACTS / f"server-{tmp_path.name}.log")


@pytest.fixture
def service(tmp_path):
    with running_service(tmp_path) as url:
        yield url


API_KEY = "browser-e2e-key-0123456789"


@pytest.fixture(params=["daphne", "uvicorn"])
def keyed_service(request, tmp_path):
    """In development, but with an API key configured: every API call and socket needs it."""
    with running_service(tmp_path, request.param, API_KEYS=API_KEY) as url:
        yield url


def launch(pw, wav: Path | None = None):
    assert Path(CHROMIUM).exists(), "chromium is missing: scripts/test installs it (apt package chromium)"
    microphone = (
        ["--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"]
        + [f"--use-file-for-fake-audio-capture={wav}"]
        if wav
        else []
    )
    return pw.chromium.launch(
        executable_path=CHROMIUM,
        headless=True,
        args=[
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            *microphone,
            "--autoplay-policy=no-user-gesture-required",
        ],
    )


def wait_until_true(page, expression: str, timeout_s: float) -> None:
    """Poll ``expression`` through ``page.evaluate`` until it is true. Not ``wait_for_function``:
    its polling predicate is built with eval, which the pages' Content-Security-Policy (no
    'unsafe-eval') forbids whenever the first check is false."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"not true within {timeout_s} s: {expression}"
        page.wait_for_timeout(100)


def assert_stored_timing(page, service: str, session: str, shown: str) -> None:
    """``shown`` ("412 ms") is the rounded ``end_to_first_audio`` of one of the session's assistant
    turns as the API returns them (the history writer is off the socket path: wait for it)."""
    ms = int(shown.split()[0])
    for _ in range(50):
        history = page.request.get(f"{service}/api/v1/sessions/{session}").json()["history"]
        stored = {
            round(t["latency_ms"]["end_to_first_audio"])
            for t in history
            if t["role"] == "assistant" and t["latency_ms"]["end_to_first_audio"] is not None
        }
        if ms in stored:
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"{shown} is none of the stored turns' end_to_first_audio {sorted(stored)}")


def admin_login(page, service: str, tmp_path: Path, next_path: str) -> None:
    """A staff user in the service's database, logged in through the admin's own form."""
    env = base_env(
        tmp_path,
        DJANGO_SUPERUSER_USERNAME="ops",
        DJANGO_SUPERUSER_EMAIL="ops@example.com",
        DJANGO_SUPERUSER_PASSWORD="pw-browser-0123456789",
    )
    subprocess.run(
        [PYTHON, "manage.py", "createsuperuser", "--noinput"], cwd=ROOT, env=env, check=True, timeout=60
    )
    page.goto(f"{service}/admin/login/?next={next_path}")
    page.get_by_label("Username").fill("ops")
    page.get_by_label("Password").fill("pw-browser-0123456789")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"**{next_path}")


def test_talk_to_the_banking_agents_in_chromium(service, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    wav = spoken_wav(tmp_path / "caller.wav", "i lost my card please help")
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = launch(pw, wav)
        page = browser.new_page()
        console: list[str] = []
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        try:
            page.goto(service + "/")
            expect(page.locator("#scenario option[value=banking]")).to_have_count(1)
            page.select_option("#scenario", "banking")
            page.get_by_label("Voice processing (echo cancellation)").uncheck()  # clean synthetic input
            page.get_by_role("button", name="Start microphone").click()
            expect(page.locator("#session")).not_to_have_text("–", timeout=10_000)
            expect(page.locator("#transcript li.user").first).to_contain_text(
                "i lost my", ignore_case=True, timeout=30_000
            )
            expect(page.locator("#activity li.handoff").first).to_contain_text(
                "concierge → auth_agent", timeout=15_000
            )
            expect(page.locator("#transcript li.agent").filter(has_text="auth_agent")).not_to_have_count(0)
            expect(page.locator("#agent")).to_have_text("auth_agent")
            wait_until_true(page, "window.__voice.received.audio > 0 && window.__voice.chunksPlayed > 0", 15)
            assert page.get_by_role("button", name="Stop microphone").get_attribute("aria-pressed") == "true"
            # each spoken turn's end of speech -> first agent audio, next to the agent's name
            timing = page.locator("#transcript li.agent .who .timing").first
            expect(timing).to_have_text(re.compile(r"^\d+ ms$"), timeout=15_000)
            session = page.locator("#session").inner_text()
            assert_stored_timing(page, service, session, timing.inner_text())
            page.screenshot(path=str(ARTIFACTS / "conversation.png"), full_page=True)
            # keyboard: typed input through the text box
            page.locator("#text").focus()
            page.keyboard.type("what is my balance")
            page.keyboard.press("Enter")
            expect(page.locator("#transcript li.user").filter(has_text="what is my balance")).to_have_count(1)

            dashboard = browser.new_page()
            dashboard.goto(service + "/dashboard")
            expect(dashboard.locator("#relay-state")).to_have_text("Connected", timeout=10_000)
            page.locator("#text").fill("hello again")
            page.keyboard.press("Enter")
            expect(dashboard.locator("#feed li").filter(has_text="hello again")).not_to_have_count(
                0, timeout=10_000
            )
            expect(dashboard.locator("#sessions li")).not_to_have_count(0)
            # an agent answer it relayed, with its end of turn -> first audio
            dash_timing = dashboard.locator('#feed li[data-type="response"] .timing').first
            expect(dash_timing).to_have_text(re.compile(r"^\d+ ms$"), timeout=15_000)
            assert_stored_timing(page, service, session, dash_timing.inner_text())
            dashboard.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

            # the admin conversation viewer of this session: transcript and the stage waterfall
            admin = browser.new_page()
            admin_login(admin, service, tmp_path, f"/admin/agents_app/session/{session}/change/")
            viewer = admin.locator("#conversation-viewer")
            expect(viewer.locator("li.user").first).to_contain_text("i lost my", ignore_case=True)
            expect(viewer.locator("li.handoff").first).to_contain_text("concierge → auth_agent")
            bars = viewer.locator(".waterfall .bar.end_to_first_audio")
            expect(bars).not_to_have_count(0)
            widths = [
                bars.nth(i).evaluate("b => b.getBoundingClientRect().width") for i in range(bars.count())
            ]
            assert all(w >= 0 for w in widths) and max(widths) > 0  # drawn, scaled to the data
            admin.screenshot(path=str(ARTIFACTS / "admin-viewer.png"), full_page=True)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "failure.png"), full_page=True)
            (ARTIFACTS / "console.log").write_text("\n".join(console))
            raise
        finally:
            browser.close()


def test_with_an_api_key_the_pages_ask_for_it_then_work(keyed_service):
    """Finding 11.3: the page and the dashboard said nothing and did nothing once a key existed;
    finding 11.4: a dashboard opened after a conversation started did not list it."""
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw, ExitStack() as stack:
        browser = launch(pw)
        page = browser.new_page()
        try:
            page.goto(keyed_service + "/")
            expect(page.locator("#key-form")).to_be_visible()
            expect(page.locator("#key-message")).to_contain_text("needs an API key")
            expect(page.locator("#scenario")).to_contain_text("API key needed")
            page.locator("#text").fill("hello")
            page.keyboard.press("Enter")
            expect(page.locator("#notice")).to_contain_text("Not connected")
            page.screenshot(path=str(ARTIFACTS / "key-prompt.png"), full_page=True)

            page.get_by_role("textbox", name="API key").fill(API_KEY)
            page.get_by_role("button", name="Use this key").click()
            expect(page.locator("#key-form")).to_be_hidden()
            expect(page.locator("#scenario option[value=banking]")).to_have_count(1)
            page.select_option("#scenario", "banking")
            page.locator("#text").fill("i lost my card")
            page.keyboard.press("Enter")
            expect(page.locator("#transcript li.user")).to_contain_text("i lost my card", timeout=15_000)
            expect(page.locator("#transcript li.agent")).not_to_have_count(0, timeout=15_000)
            session = page.locator("#session").inner_text()
            assert page.evaluate("localStorage.getItem('voiceagent.apikey')") == API_KEY

            # a dashboard opened now, in a fresh profile without the key, through a wire that breaks
            proxy = stack.enter_context(FaultProxy(int(keyed_service.rsplit(":", 1)[1])))
            other = browser.new_context()
            dashboard = other.new_page()
            dashboard.goto(proxy.url + "/dashboard")
            expect(dashboard.locator("#relay-state")).to_contain_text("(1008): unauthorized")
            expect(dashboard.locator("#key-form")).to_be_visible()
            dashboard.get_by_role("textbox", name="API key").fill(API_KEY)
            dashboard.get_by_role("button", name="Use this key").click()
            expect(dashboard.locator("#relay-state")).to_have_text("Connected", timeout=10_000)
            listed = dashboard.get_by_role("button", name=f"Follow session {session}")
            expect(listed).to_have_count(1, timeout=10_000)
            expect(dashboard.locator("#sessions li")).to_contain_text("browser")
            dashboard.screenshot(path=str(ARTIFACTS / "dashboard-snapshot.png"), full_page=True)

            # the connection is lost (a load balancer's cut, a crashed worker): it reconnects by itself
            assert proxy.cut() >= 1
            expect(dashboard.locator("#relay-state")).to_contain_text("(1006)")
            expect(dashboard.locator("#relay-state")).to_contain_text(re.compile(r"Reconnecting in \d+ s"))
            expect(dashboard.locator("#relay-state")).to_have_text("Connected", timeout=10_000)
            expect(dashboard.get_by_role("button", name=f"Follow session {session}")).to_have_count(1)

            # a person takes the conversation over from the dashboard, speaks, hands it back (issue 32)
            dashboard.get_by_label("Your name").fill("alice")
            dashboard.get_by_role("button", name=f"Take over session {session}").click()
            expect(dashboard.locator("#feed li").filter(has_text="taken over by alice")).to_have_count(1)
            expect(page.locator("#activity li.takeover")).to_contain_text("alice (a person) has joined")
            say = dashboard.get_by_role("textbox", name="Say to the caller (in the agent's voice)")
            say.fill("Hello, this is Alice from the bank.")
            dashboard.get_by_role("button", name="Say", exact=True).click()
            expect(page.locator("#transcript li.agent").filter(has_text="this is Alice")).to_contain_text(
                "alice (a person)", timeout=15_000
            )
            expect(dashboard.locator("#feed li").filter(has_text="alice (person")).not_to_have_count(0)
            dashboard.screenshot(path=str(ARTIFACTS / "dashboard-takeover.png"), full_page=True)
            dashboard.get_by_role("button", name=f"Hand back session {session}").click()
            expect(dashboard.locator("#feed li").filter(has_text="handed back")).to_have_count(1)
            expect(dashboard.locator("#say-form")).to_be_hidden()
            expect(dashboard.get_by_role("button", name=f"Take over session {session}")).to_have_count(1)

            page.close()  # the conversation ends: the dashboard drops it
            expect(listed).to_have_count(0, timeout=10_000)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "key-failure.png"), full_page=True)
            raise
        finally:
            browser.close()


def test_a_live_conversation_that_cannot_start_stops_the_microphone(service, tmp_path):
    """Live mode without a realtime API: the page shows the failure and stops the microphone, and
    the server logs the failure once, not once per audio frame."""
    from playwright.sync_api import expect, sync_playwright

    wav = spoken_wav(tmp_path / "caller.wav", "hello is anybody there", tail_s=3.0)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = launch(pw, wav)
        page = browser.new_page()
        try:
            page.goto(service + "/")
            expect(page.locator("#scenario option[value=banking]")).to_have_count(1)
            page.select_option("#mode", "live")
            page.get_by_role("button", name="Start microphone").click()
            expect(page.locator("#error")).to_contain_text("start_failed", timeout=15_000)
            expect(page.locator("#error")).to_contain_text("realtime voice API")
            mic = page.get_by_role("button", name="Start microphone")
            expect(mic).to_have_attribute("aria-pressed", "false")
            expect(page.locator("#notice")).to_contain_text("Microphone stopped")
            expect(page.locator("#state")).to_have_text("not started")
            page.wait_for_timeout(1500)  # a microphone still on would send 75 frames meanwhile
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "live-failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    log = (tmp_path / "server.log").read_text()
    assert log.count("could not start conversation") == 1, log[-3000:]
