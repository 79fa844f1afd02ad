"""The built-in tools take what the caller typed on the keypad: a model may pass the caller's turn
("Keypad entry: 482913") on verbatim, or its digits; a date of birth typed is MMDDYYYY."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agents_app.builtin_tools import expected_mfa_code, register_builtin_tools
from agents_app.builtin_tools.caller import keypad_digits
from agents_app.profiles import generate_profile, profile_memory
from voiceagent.conversation.tools import ToolContext, ToolRegistry

NOW = datetime(2025, 6, 15, 12, 0, 0, tzinfo=UTC).timestamp()
SESSION = "sess-keypad-1"


@pytest.fixture
def registry():
    registry = ToolRegistry()
    register_builtin_tools(registry)
    return registry


def _ctx(profile: dict) -> ToolContext:
    return ToolContext(
        session_id=SESSION, agent="auth_agent", scenario="banking", memory=profile_memory(profile)
    )


async def _run(registry, name: str, args: dict, ctx: ToolContext) -> dict:
    outcome = await registry.execute(name, args, ctx)
    assert outcome.ok, outcome.error
    return outcome.result


@pytest.mark.parametrize("typed", ["Keypad entry: {ssn}", "keypad entry: {ssn}#", "{ssn}"])
async def test_ssn_last4_typed(registry, typed):
    profile = generate_profile(seed=12, now=NOW)
    args = {
        "full_name": profile["full_name"],
        "ssn_last4": typed.format(ssn=profile["verification"]["ssn_last4"]),
    }
    assert (await _run(registry, "verify_client_identity", args, _ctx(profile)))["verified"] is True


async def test_date_of_birth_typed_month_first(registry):
    profile = generate_profile(seed=4, now=NOW)
    born = datetime.strptime(profile["verification"]["date_of_birth"], "%Y-%m-%d")
    for typed in (born.strftime("Keypad entry: %m%d%Y"), born.strftime("%m%d%Y"), born.strftime("%Y%m%d")):
        args = {"full_name": profile["full_name"], "date_of_birth": typed}
        assert (await _run(registry, "verify_client_identity", args, _ctx(profile)))["verified"] is True, (
            typed
        )
    wrong = {"full_name": profile["full_name"], "date_of_birth": "Keypad entry: 13011985"}  # no month 13
    assert (await _run(registry, "verify_client_identity", wrong, _ctx(profile)))["verified"] is False


@pytest.mark.parametrize(
    "typed", ["Keypad entry: {code}", "Keypad entry: {head}*{tail}", "keypad entry:{code}#"]
)
async def test_mfa_code_typed(registry, typed):
    profile = generate_profile(seed=7, now=NOW)
    ctx = _ctx(profile)
    assert (
        await _run(
            registry,
            "verify_client_identity",
            {"full_name": profile["full_name"], "date_of_birth": profile["verification"]["date_of_birth"]},
            ctx,
        )
    )["verified"] is True
    assert (await _run(registry, "send_mfa_code", {}, ctx))["sent"] is True
    code = expected_mfa_code(SESSION, profile)
    wrong = await _run(
        registry, "verify_mfa_code", {"code": "Keypad entry: 000000" if code != "000000" else "1"}, ctx
    )
    assert wrong["error"] == "wrong_code" and wrong["attempts_remaining"] == 2
    given = typed.format(code=code, head=code[:3], tail=code[3:])
    assert await _run(registry, "verify_mfa_code", {"code": given}, ctx) == {
        "verified": True,
        "authenticated": True,
    }


def test_the_tool_descriptions_tell_a_model_what_a_keypad_entry_is(registry):
    verify = registry.get("verify_mfa_code").to_openai()["function"]
    assert '"Keypad entry: 482913" is the caller typing 482913' in verify["description"]
    identity = registry.get("verify_client_identity").parameters["properties"]["ssn_last4"]
    assert "typed on the keypad" in identity["description"]


def test_keypad_digits():
    assert keypad_digits("Keypad entry: 12*34#") == "1234"
    assert keypad_digits("my code is 1234") is None
    assert keypad_digits("") is None
