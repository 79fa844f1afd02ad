"""Agent tests over a running service (``manage.py test_agents --transport browser|phone|twilio|audiohook``):
the service started as ``scripts/run`` starts it (the acceptance suite's :func:`deployments.start`),
on the offline providers (Whisper, Piper, the rules dialog), its telephony pointed at the local ACS
peer (no media audience, as a development service runs) and its realtime voice API at the local
realtime peer (the contact-center bridge runs on nothing else). Short test files run through the
runner (:func:`agents_app.evals.runner.run`) over each transport, each checking a handoff, a tool
call and a reply: typed, spoken and keypad turns on the browser socket, spoken and keypad turns on
the phone (ACS and Twilio), and over AudioHook a scripted realtime model's handoff and tool call.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

ACCEPTANCE = Path(__file__).resolve().parents[1] / "acceptance"
if str(ACCEPTANCE) not in sys.path:
    sys.path.insert(0, str(ACCEPTANCE))

from acs_peer import AcsPeer, telephony_env  # noqa: E402
from deployments import RUN, Deployment, assert_log_clean, start  # noqa: E402
from realtime_peer import Call, RealtimePeer, Say  # noqa: E402
from servers import ROOT  # noqa: E402

pytestmark = pytest.mark.slow

REALTIME_KEY = "evals-realtime-key"
TWILIO = {"TWILIO_ACCOUNT_SID": "AC" + "7" * 32, "TWILIO_AUTH_TOKEN": "evals-twilio-token"}

# the greeting and the first turn every banking test here opens with
OPENING = """    greeting: {agent: concierge, reply: {contains: "how can i help"}}
    turns:
      - say: "I lost my card"
        expect:
          agent: auth_agent
          handoff: {from: concierge, to: auth_agent, type: announced}
          reply: {contains: "full name"}
"""

BANKING = """
suite: remote
scenario: banking
tests:
  - name: a lost card, verified by the demo caller and the keypad
    seed: 7
"""
BANKING += OPENING
BANKING += """      - say: "Yes, that's me."
        audio: true
        expect:
          handoff: none
          tool_calls:
            - {name: verify_client_identity, args: {full_name: "{{ profile.full_name }}"}}
            - {name: send_mfa_code}
          reply: {contains: "type it on your keypad"}
      - dtmf: "{{ mfa_code }}#"
        expect:
          agent: cards_agent
          handoff: {from: auth_agent, to: cards_agent, type: discrete}
          tool_calls: [{name: verify_mfa_code, args: {code: {digits: "{{ mfa_code }}"}}}]
          reply: {contains: "which card"}
"""

# over Twilio the runner's own wire is what is new (signed webhook and stream, speech as mu-law
# 8 kHz, keys as dtmf messages); the banking flow itself is the browser's and the ACS phone's test.
# Two turns, not the four of BANKING: the agent's long verification answers play in real time
TWILIO_SHORT = """
suite: remote-twilio
scenario: banking
tests:
  - name: a lost card over Twilio, then keys
"""
TWILIO_SHORT += OPENING
TWILIO_SHORT += """      - dtmf: "4821#"
"""

CONTACT_CENTER = """
suite: remote-audiohook
scenario: banking
tests:
  - name: a scripted realtime model hands off and verifies a keypad entry
    seed: 7
    greeting: {agent: concierge, reply: {contains: "how can i help"}}
    turns:
      - say: "I lost my card"
        expect:
          agent: auth_agent
          handoff: {from: concierge, to: auth_agent}
          tool_calls: [{name: handoff_auth_agent}]
      - dtmf: "1234#"
        expect:
          tool_calls: [{name: verify_client_identity, args: {full_name: "{{ profile.full_name }}"}}]
          reply: {contains: "you are verified"}
"""


@pytest.fixture(scope="module")
def realtime():
    with RealtimePeer(api_key=REALTIME_KEY) as peer:
        yield peer


@pytest.fixture(scope="module")
def service(tmp_path_factory, realtime) -> Deployment:
    """``scripts/run`` with the offline providers, telephony on the ACS peer, realtime on the peer."""
    acs = AcsPeer().start()
    env = {
        "LOG_LEVEL": "INFO",
        **telephony_env(acs),
        "REALTIME_PROVIDER": "voicelive",
        "CLOUD_REALTIME_VOICE_ENDPOINT": f"http://127.0.0.1:{realtime.port}",
        "CLOUD_REALTIME_VOICE_API_KEY": REALTIME_KEY,
        "CLOUD_REALTIME_VOICE_MODEL": "gpt-realtime",
        **TWILIO,  # Twilio's webhook and stream answer too (ACS places the outbound calls)
    }
    root = tmp_path_factory.mktemp("evals-remote")
    deployment = start(RUN, root, env, api_key=f"evals-{secrets.token_hex(12)}")
    try:
        yield deployment
    finally:
        deployment.stop()
        acs.stop()


def suite(tmp_path: Path, text: str):
    from agents_app.evals.spec import load_suites

    path = tmp_path / "remote.yaml"
    path.write_text(text)
    return load_suites([path])


def run_on(service: Deployment, transport: str, tests):
    from agents_app.evals.runner import run
    from agents_app.evals.targets import make_target

    target = make_target(transport, url=f"http://127.0.0.1:{service.port}", api_key=service.api_key)
    return asyncio.run(run(tests, target))


def explain(report) -> str:
    lines = []
    for result in report.results:
        lines += [f"{result.test.name}: {result.status}", *result.notes]
        lines += [
            f"  turn {f.turn_index} {f.expectation}: expected {f.expected}, got {f.actual}"
            for f in result.failures
        ]
        lines += [f"  {line}" for f in result.failures[:1] for line in f.transcript.splitlines()]
    return "\n".join(lines)


def test_a_banking_conversation_passes_over_the_phone(service, tmp_path):
    """The test's typed turn spoken (a phone has no text): a handoff, tool calls and replies over
    the ACS media stream (the browser: the command's test below, which runs the same file)."""
    report = run_on(service, "phone", suite(tmp_path, BANKING))
    assert report.ok and report.passed == 1, explain(report)
    (result,) = report.results
    greeting, lost, confirmed, keyed = result.turns
    assert greeting.first_audio_ms is not None and lost.transcript.lower().startswith("i lost my card")
    assert keyed.transcript.startswith("Keypad entry: ")
    assert lost.first_audio_ms is not None  # spoken: the service's transcript came from audio


def test_a_failing_expectation_fails_over_the_browser(service, tmp_path):
    """The target reports what happened, not what the test wanted: a wrong expectation fails."""
    wrong = BANKING.replace('reply: {contains: "full name"}', 'reply: {contains: "date of birth first"}')
    report = run_on(service, "browser", suite(tmp_path, wrong))
    assert not report.ok and report.failed == 1, explain(report)
    (failure,) = report.results[0].failures
    assert failure.turn_index == 1 and "full name" in failure.actual.lower()


def test_audiohook_runs_on_the_realtime_loop(service, tmp_path, realtime):
    from agents_app.profiles import generate_profile

    profile = generate_profile(seed=7, scenario="banking")  # what the service makes for seed 7
    identity = {"full_name": profile["full_name"], "date_of_birth": profile["verification"]["date_of_birth"]}
    realtime.user_says("i lost my card")
    realtime.push(
        Call("handoff_auth_agent", {"reason": "lost card"}),
        Call("verify_client_identity", identity),
        Say("Thank you, you are verified."),
    )
    report = run_on(service, "audiohook", suite(tmp_path, CONTACT_CENTER))
    assert report.ok and report.passed == 1, explain(report)
    typed = realtime.received("conversation.item.create")
    assert any("Keypad entry: 1234" in str(event) for event in typed)


def test_the_command_runs_a_banking_conversation_over_the_browser(service, tmp_path):
    """``manage.py test_agents --transport browser --url ... --api-key ...``: typed text, speech and
    keypad over the browser socket, a handoff, tool calls and replies seen; exit 0, the table, the
    JUnit and JSON reports."""
    path = tmp_path / "remote.yaml"
    path.write_text(BANKING)
    junit, report = tmp_path / "junit.xml", tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "test_agents",
            str(path),
            "--transport",
            "browser",
            "--url",
            f"http://127.0.0.1:{service.port}",
            "--api-key",
            service.api_key,
            "--junit",
            str(junit),
            "--json",
            str(report),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "a lost card, verified by the demo caller and the keypad" in done.stdout
    lines = done.stdout.splitlines()
    turn = next(i for i, line in enumerate(lines) if " turn 1: caller " in line)  # each turn as it ends
    assert turn < next(i for i, line in enumerate(lines) if "PASS" in line)
    assert 'failures="0"' in junit.read_text()
    (test,) = json.loads(report.read_text())["tests"]
    greeting, lost, confirmed, keyed = test["turns"]
    assert greeting["first_audio_ms"] is not None and lost["transcript"].lower().startswith("i lost my card")
    assert keyed["transcript"].startswith("Keypad entry: ")


def test_the_command_runs_a_banking_conversation_over_twilio(service, tmp_path):
    """``manage.py test_agents --transport twilio``: the command plays Twilio with the service's
    account and token (from its environment): a signed voice webhook, then the Media Stream with a
    signed upgrade, speech as mu-law 8 kHz and keys as ``dtmf``; a handoff and its reply."""
    import os

    from acs_peer import TEST_BASE_URL

    path = tmp_path / "remote.yaml"
    path.write_text(TWILIO_SHORT)
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEPHONY_", "TWILIO_"))}
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "test_agents",
            str(path),
            "--transport",
            "twilio",
            "--url",
            f"http://127.0.0.1:{service.port}",
            "--api-key",
            service.api_key,
            "--json",
            str(report),
        ],
        cwd=ROOT,
        env={**env, **TWILIO, "BASE_URL": TEST_BASE_URL},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (test,) = json.loads(report.read_text())["tests"]
    greeting, lost, keyed = test["turns"]
    assert greeting["first_audio_ms"] is not None and lost["transcript"].lower().startswith("i lost my card")
    assert keyed["transcript"] == "Keypad entry: 4821"
    assert "Twilio stream" in service.log_text()  # it was the Twilio wire


def test_the_service_log_is_clean(service):
    assert_log_clean(service)
