"""Demo customer profiles: determinism, the CONTRACTS shape, internal consistency, session memory."""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime

import pytest

from agents_app.profiles import (
    PROFILE_TTL_SECONDS,
    ascii_slug,
    generate_profile,
    is_expired,
    profile_id,
    profile_memory,
)

NOW = datetime(2025, 6, 15, 12, 0, 0, tzinfo=UTC).timestamp()
TIMESTAMPS = ("created_at", "expires_at")
SEEDS = range(60)


def _strip(profile: dict) -> dict:
    return {k: v for k, v in profile.items() if k not in TIMESTAMPS}


def _decimals_ok(value: float) -> bool:
    return isinstance(value, float) and round(value, 2) == value


# --------------------------------------------------------------------------------------------------
# Determinism
# --------------------------------------------------------------------------------------------------


def test_same_seed_same_profile_apart_from_timestamps():
    first = generate_profile(seed=42, now=NOW)
    second = generate_profile(seed=42, now=NOW + 3600)  # same day, an hour later
    assert _strip(first) == _strip(second)
    assert first["created_at"] != second["created_at"]
    assert generate_profile(seed=42, now=NOW)["created_at"] == "2025-06-15T12:00:00Z"


def test_id_is_derived_from_seed_and_scenario():
    profile = generate_profile(seed=5, now=NOW)
    assert profile["id"] == profile_id(5, "banking")
    assert re.fullmatch(r"prof_[0-9a-f]{16}", profile["id"])
    assert generate_profile(seed=5, scenario="insurance", now=NOW)["id"] != profile["id"]


def test_different_seeds_differ():
    profiles = [generate_profile(seed=seed, now=NOW) for seed in SEEDS]
    assert len({p["id"] for p in profiles}) == len(profiles)
    assert len({p["client_id"] for p in profiles}) == len(profiles)
    assert len({p["full_name"] for p in profiles}) > 20  # a few dozen names, not one


def test_no_seed_picks_and_records_a_random_one():
    first, second = generate_profile(now=NOW), generate_profile(now=NOW)
    assert isinstance(first["seed"], int)
    assert first["seed"] != second["seed"]
    assert _strip(generate_profile(seed=first["seed"], now=NOW)) == _strip(first)


def test_seed_is_recorded_and_same_person_in_both_scenarios():
    bank = generate_profile(seed=11, now=NOW)
    insurance = generate_profile(seed=11, scenario="insurance", now=NOW)
    assert bank["seed"] == insurance["seed"] == 11
    for key in ("full_name", "email", "phone_number", "client_id", "verification"):
        assert bank[key] == insurance[key]


@pytest.mark.parametrize("scenario", ["casino", "", "Banking"])
def test_unknown_scenario_is_rejected(scenario):
    with pytest.raises(ValueError, match="scenario"):
        generate_profile(seed=1, scenario=scenario)


@pytest.mark.parametrize("seed", ["7", 1.5, True])
def test_non_int_seed_is_rejected(seed):
    with pytest.raises(TypeError):
        generate_profile(seed=seed)


# --------------------------------------------------------------------------------------------------
# Shape
# --------------------------------------------------------------------------------------------------

CONTRACT_KEYS = {
    "id": str,
    "full_name": str,
    "email": str,
    "phone_number": str,
    "institution_name": str,
    "client_id": str,
    "accounts": list,
    "mfa": dict,
    "verification": dict,
    "created_at": str,
    "expires_at": str,
}


@pytest.mark.parametrize("scenario", ["banking", "insurance"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 123456789])
def test_shape_matches_contract(scenario, seed):
    profile = generate_profile(seed=seed, scenario=scenario, now=NOW)
    for key, kind in CONTRACT_KEYS.items():
        assert isinstance(profile[key], kind), key
    assert profile["accounts"]
    for account in profile["accounts"]:
        assert set(account) == {"type", "number_last4", "balance", "currency"}
        assert isinstance(account["type"], str)
        assert re.fullmatch(r"\d{4}", account["number_last4"])
        assert isinstance(account["balance"], float)
        assert account["currency"] == "USD"
    assert set(profile["mfa"]) == {"method", "enabled", "code_length"}
    assert profile["mfa"]["method"] in ("sms", "email")
    assert profile["mfa"]["enabled"] is True
    assert isinstance(profile["mfa"]["code_length"], int) and profile["mfa"]["code_length"] >= 4
    assert set(profile["verification"]) == {"ssn_last4", "date_of_birth"}
    assert json.loads(json.dumps(profile)) == profile  # plain JSON data


def test_extras_are_present():
    profile = generate_profile(seed=8, now=NOW)
    assert profile["scenario"] == "banking"
    assert set(profile["address"]) >= {"street", "city", "state", "postal_code"}
    assert re.fullmatch(r"\d{5}", profile["address"]["postal_code"])
    assert profile["cards"] and all(card["status"] == "active" for card in profile["cards"])
    for card in profile["cards"]:
        assert re.fullmatch(r"\d{4}", card["last4"]) and card["type"] in ("debit", "credit")


# --------------------------------------------------------------------------------------------------
# Consistency
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_profile_is_internally_consistent(seed):
    profile = generate_profile(seed=seed, now=NOW)
    first, last = profile["first_name"], profile["last_name"]
    assert profile["full_name"] == f"{first} {last}"

    local, _, domain = profile["email"].partition("@")
    assert profile["email"].isascii() and profile["email"] == profile["email"].lower()
    assert domain in ("example.com", "example.net", "example.org")
    assert local.startswith(ascii_slug(first)[0]) and ascii_slug(last) in local
    assert re.fullmatch(r"[a-z0-9._]+", local)

    assert re.fullmatch(r"\+1555\d{7}", profile["phone_number"])
    assert re.fullmatch(r"CL-\d{8}", profile["client_id"])
    assert profile["institution_name"] == "Contoso Bank"

    verification = profile["verification"]
    assert re.fullmatch(r"\d{4}", verification["ssn_last4"]) and verification["ssn_last4"] != "0000"
    born = date.fromisoformat(verification["date_of_birth"])
    today = datetime.fromtimestamp(NOW, UTC).date()
    age = today.year - born.year - ((today.month, today.day) < (born.month, born.day))
    assert 21 <= age <= 85

    created = datetime.strptime(profile["created_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    expires = datetime.strptime(profile["expires_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert created.timestamp() == NOW
    assert (expires - created).total_seconds() == PROFILE_TTL_SECONDS == 86400

    accounts = {a["type"]: a for a in profile["accounts"]}
    assert "checking" in accounts and set(accounts) <= {"checking", "savings", "credit_card"}
    assert len(accounts) == len(profile["accounts"])
    numbers = [a["number_last4"] for a in profile["accounts"]] + [c["last4"] for c in profile["cards"]]
    assert len(set(numbers)) == len(numbers)
    for account in profile["accounts"]:
        assert _decimals_ok(account["balance"])
    assert 0 < accounts["checking"]["balance"] < 10_000
    if "savings" in accounts:
        assert 0 < accounts["savings"]["balance"] < 100_000
    if "credit_card" in accounts:
        assert -10_000 < accounts["credit_card"]["balance"] < 0  # owed
        assert any(card["type"] == "credit" for card in profile["cards"])

    transactions = profile["recent_transactions"]
    assert 10 <= len(transactions) <= 15
    assert len({tx["id"] for tx in transactions}) == len(transactions)
    dates = [tx["date"] for tx in transactions]
    assert dates == sorted(dates, reverse=True)  # newest first
    cards = {c["last4"]: c for c in profile["cards"]}
    for tx in transactions:
        assert set(tx) >= {"id", "date", "merchant", "amount", "currency", "category"}
        assert re.fullmatch(r"TXN-[0-9A-F]{8}", tx["id"])
        assert 0 <= (today - date.fromisoformat(tx["date"])).days < 30
        assert _decimals_ok(tx["amount"]) and tx["amount"] != 0
        assert tx["currency"] == "USD"
        assert tx["account_type"] in accounts
        assert tx["account_last4"] == accounts[tx["account_type"]]["number_last4"]
        if tx["card_last4"] is not None:
            assert cards[tx["card_last4"]]["account_type"] == tx["account_type"]


def test_names_fold_to_ascii_emails():
    assert ascii_slug("Zoë") == "zoe"
    assert ascii_slug("O'Connor") == "oconnor"
    assert ascii_slug("Fernández") == "fernandez"
    emails = {generate_profile(seed=seed, now=NOW)["email"] for seed in range(300)}
    assert all(email.isascii() for email in emails)


def test_insurance_profile():
    for seed in range(30):
        profile = generate_profile(seed=seed, scenario="insurance", now=NOW)
        assert profile["institution_name"] == "Contoso Insurance"
        assert profile["scenario"] == "insurance"
        assert profile["cards"] == []
        assert 1 <= len(profile["policies"]) <= 3
        types = [p["type"] for p in profile["policies"]]
        assert len(set(types)) == len(types) and not {"home", "renters"} <= set(types)
        today = datetime.fromtimestamp(NOW, UTC).date()
        for policy in profile["policies"]:
            assert re.fullmatch(r"POL-\d{8}", policy["policy_number"])
            assert policy["status"] == "active"
            assert _decimals_ok(policy["premium_monthly"]) and policy["premium_monthly"] > 0
            assert (
                date.fromisoformat(policy["start_date"]) < today < date.fromisoformat(policy["renewal_date"])
            )
        (billing,) = profile["accounts"]
        assert billing["type"] == "premium_billing" and billing["balance"] <= 0
        monthly = round(sum(p["premium_monthly"] for p in profile["policies"]), 2)
        assert billing["balance"] in (0.0, -monthly)
        assert profile["recent_transactions"]
        assert all(tx["amount"] == monthly for tx in profile["recent_transactions"])
        for claim in profile["claims"]:
            assert claim["policy_number"] in {p["policy_number"] for p in profile["policies"]}


def test_is_expired():
    profile = generate_profile(seed=1, now=NOW)
    assert not is_expired(profile, now=NOW + PROFILE_TTL_SECONDS - 1)
    assert is_expired(profile, now=NOW + PROFILE_TTL_SECONDS)
    assert is_expired({"expires_at": "garbage"})


# --------------------------------------------------------------------------------------------------
# Session memory
# --------------------------------------------------------------------------------------------------


def test_profile_memory():
    profile = generate_profile(seed=21, now=NOW)
    memory = profile_memory(profile)
    assert memory["caller_name"] == profile["full_name"]
    assert memory["caller_first_name"] == profile["first_name"] == profile["full_name"].split()[0]
    assert memory["caller_phone"] == profile["phone_number"]
    assert memory["caller_email"] == profile["email"]
    assert memory["client_id"] == profile["client_id"]
    assert memory["institution_name"] == "Contoso Bank"
    assert memory["caller_profile"] == profile
    assert memory["caller_profile"] is not profile  # the session gets its own copy
    assert memory["authenticated"] is False
    assert memory["identity_verified"] is False
    json.dumps(memory)


def test_profile_memory_resets_a_previous_callers_state():
    memory = {"authenticated": True, "identity_verified": True, "verification_attempts": 2, "other": 1}
    memory.update(profile_memory(generate_profile(seed=2, now=NOW)))
    assert memory["authenticated"] is False and memory["identity_verified"] is False
    assert memory["verification_attempts"] == 0
    assert memory["other"] == 1
