# ruff: noqa: F811 (the fixtures are test_rules.py's, imported by name)
"""The offline dialog takes keypad entries ("Keypad entry: 482913", the turn the engine makes of DTMF
digits) wherever it takes spoken digits: the one-time code, the last four of the SSN, a card's
last four; walked with the engine's requests and the real built-in tools (test_rules.py's walk)."""

from __future__ import annotations

import pytest
from test_rules import banking_walk, chat, definitions, registry, spoken  # noqa: F401 (fixtures)

from agents_app.builtin_tools import expected_mfa_code
from voiceagent.llm.rules.spoken import keypad_entry


def keyed(digits: str) -> str:
    return f"Keypad entry: {digits}"


async def test_a_typed_code_verifies_and_a_wrong_one_is_refused(chat, definitions, registry):
    walk, profile = banking_walk(chat, definitions, registry, seed=7, session_id="walk-keypad")
    debit, credit = profile["cards"]
    await walk.say("i lost my card")
    t = await walk.say("yes thats me")
    assert t.tools == ["verify_client_identity", "send_mfa_code"]
    assert "or type it on your keypad" in t.text
    code = expected_mfa_code(walk.session_id, profile)

    t = await walk.say(keyed(code[:4]))  # too short: not checked, no attempt spent
    assert t.tools == [] and "You typed 4 digits, but your code has 6. Please type it again." in t.text
    assert walk.memory["_mfa_challenge"]["attempts"] == 0

    wrong = "000000" if code != "000000" else "111111"
    t = await walk.say(keyed(wrong))
    assert t.args("verify_mfa_code") == {"code": wrong}
    assert t.results["verify_mfa_code"]["error"] == "wrong_code"
    assert "doesn't match. Please type it again." in t.text
    assert walk.memory.get("authenticated") is False

    t = await walk.say(keyed(code))
    assert t.args("verify_mfa_code") == {"code": code}
    assert walk.memory["authenticated"] is True
    assert t.handoffs == [("auth_agent", "cards_agent", "discrete")]
    assert "Which card is it" in t.text

    t = await walk.say(keyed(credit["last4"]))  # the card's last four, typed
    assert t.args("block_card") == {"card_last4": credit["last4"], "reason": "lost"}
    assert (
        credit["last4"] in walk.memory["blocked_cards"] and debit["last4"] not in walk.memory["blocked_cards"]
    )


async def test_a_spoken_code_is_still_asked_to_be_read_again(chat, definitions, registry):
    walk, profile = banking_walk(chat, definitions, registry, seed=7, session_id="walk-keypad-spoken")
    await walk.say("i lost my card")
    await walk.say("yes thats me")
    code = expected_mfa_code(walk.session_id, profile)
    wrong = "000000" if code != "000000" else "111111"
    t = await walk.say("my code is " + spoken(wrong))
    assert "read it out once more" in t.text and "type it" not in t.text


@pytest.mark.parametrize("name_first", [True, False])
async def test_the_ssn_last_four_typed_identifies_the_caller(chat, definitions, registry, name_first):
    walk, profile = banking_walk(chat, definitions, registry, seed=12, session_id=f"walk-ssn-{name_first}")
    await walk.say("what is my balance")
    name = f"my name is {profile['full_name'].lower()}"
    ssn = keyed(profile["verification"]["ssn_last4"])
    if name_first:
        t = await walk.say(name)
        assert "type the last four digits of your social security number on your keypad" in t.text
        t = await walk.say(ssn)
    else:
        t = await walk.say(ssn)
        assert t.tools == [] and "your full name" in t.text
        t = await walk.say(name)
    assert t.args("verify_client_identity") == {
        "full_name": profile["full_name"],
        "ssn_last4": profile["verification"]["ssn_last4"],
    }
    assert t.tools == ["verify_client_identity", "send_mfa_code"]
    assert walk.memory["identity_verified"] is True

    t = await walk.say(keyed(expected_mfa_code(walk.session_id, profile)))
    assert t.tools == ["verify_mfa_code", "handoff_cards_agent", "get_account_summary"]


async def test_a_wrong_ssn_typed_counts_as_a_failed_attempt(chat, definitions, registry):
    walk, profile = banking_walk(chat, definitions, registry, seed=12, session_id="walk-ssn-wrong")
    await walk.say("i lost my card")
    await walk.say(f"my name is {profile['full_name'].lower()}")
    wrong = "0000" if profile["verification"]["ssn_last4"] != "0000" else "1111"
    t = await walk.say(keyed(wrong))
    assert t.results["verify_client_identity"]["verified"] is False
    assert "2 attempts left" in t.text


def test_keypad_entry_is_the_turn_the_engine_makes_of_keypad_digits():
    assert keypad_entry("Keypad entry: 4829*13") == "482913"
    assert keypad_entry("keypad entry: 1234") == "1234"
    assert keypad_entry("Keypad entry: 12AB") == "12"
    assert keypad_entry("keypad entry one two three") == ""  # said, not typed
    assert keypad_entry("my code is 1234") == ""
