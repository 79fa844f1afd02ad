"""Built-in banking tools, run through a fresh ToolRegistry exactly as the engine runs them."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

import agents_app.builtin_tools as bt
from agents_app.builtin_tools import (
    BUILTIN_TOOL_NAMES,
    MFA_CODE_TTL_SECONDS,
    NOT_AUTHENTICATED,
    expected_mfa_code,
    mfa,
    register_builtin_tools,
)
from agents_app.profiles import generate_profile, profile_memory
from voiceagent.conversation.tools import REGISTRY, ToolContext, ToolRegistry

NOW = datetime(2025, 6, 15, 12, 0, 0, tzinfo=UTC).timestamp()
SESSION = "sess-test-1"


@pytest.fixture
def registry():
    registry = ToolRegistry()
    register_builtin_tools(registry)
    return registry


def _profile(seed: int = 7) -> dict:
    return generate_profile(seed=seed, now=NOW)


def _ctx(profile: dict | None = None, session_id: str = SESSION) -> ToolContext:
    memory = profile_memory(profile) if profile is not None else {}
    return ToolContext(session_id=session_id, agent="auth_agent", scenario="banking", memory=memory)


class Runner:
    """Runs tools and remembers every result, to check none leaks a secret."""

    def __init__(self, registry: ToolRegistry, ctx: ToolContext):
        self.registry, self.ctx, self.results = registry, ctx, []

    async def __call__(self, name: str, args: dict | str | None = None) -> dict:
        result = await self.registry.execute(name, args or {}, self.ctx)
        self.results.append(result)
        assert result.ok, result.error
        return result.result

    async def raw(self, name: str, args: dict | str | None = None):
        result = await self.registry.execute(name, args or {}, self.ctx)
        self.results.append(result)
        return result

    def assert_no_secrets(self, profile: dict) -> None:
        secrets = (
            profile["verification"]["ssn_last4"],
            profile["verification"]["date_of_birth"],
            expected_mfa_code(self.ctx.session_id, profile),
        )
        for result in self.results:
            text = result.to_model_content()
            for secret in secrets:
                # a secret as a value of its own, not digits that happen to sit inside a timestamp
                pattern = rf"(?<![0-9]){re.escape(secret)}(?![0-9])"
                assert re.search(pattern, text) is None, (result.name, text)
            assert "ssn" not in text.lower() and "date_of_birth" not in text


async def _authenticate(run: Runner, profile: dict) -> None:
    assert (await run("verify_client_identity", _identity(profile)))["verified"] is True
    assert (await run("send_mfa_code"))["sent"] is True
    code = expected_mfa_code(run.ctx.session_id, profile)
    assert (await run("verify_mfa_code", {"code": code}))["authenticated"] is True


def _identity(profile: dict, **overrides) -> dict:
    args = {"full_name": profile["full_name"], "date_of_birth": profile["verification"]["date_of_birth"]}
    args.update(overrides)
    return {k: v for k, v in args.items() if v is not None}


# --------------------------------------------------------------------------------------------------
# Registration and schemas
# --------------------------------------------------------------------------------------------------


def test_registered_on_import_and_idempotently():
    assert set(BUILTIN_TOOL_NAMES) <= set(REGISTRY.names())
    assert all(REGISTRY.get(name).source == "builtin" for name in BUILTIN_TOOL_NAMES)
    registry = ToolRegistry()
    assert register_builtin_tools(registry) == list(BUILTIN_TOOL_NAMES)
    version = registry.version
    register_builtin_tools(registry)
    assert registry.version == version and sorted(registry.names()) == sorted(BUILTIN_TOOL_NAMES)


def test_every_tool_the_banking_agents_list_is_builtin_or_handoff():
    agents = Path(__file__).resolve().parents[2] / "fixtures" / "agents"
    wanted = set()
    for name in ("auth_agent", "cards_agent", "fraud_agent", "concierge"):
        path = agents / name / "agent.yaml"
        wanted |= {t for t in yaml.safe_load(path.read_text())["tools"] if not t.startswith("handoff_")}
    assert wanted <= set(BUILTIN_TOOL_NAMES)


def test_schemas(registry):
    verify = registry.get("verify_client_identity").to_openai()["function"]
    params = verify["parameters"]
    assert params["required"] == ["full_name"]
    assert set(params["properties"]) == {"full_name", "date_of_birth", "ssn_last4", "client_id"}
    assert params["properties"]["ssn_last4"]["type"] == "string"
    assert "description" in params["properties"]["date_of_birth"]
    assert "ctx" not in params["properties"] and params["additionalProperties"] is False
    assert "send_mfa_code" in verify["description"]

    block = registry.get("block_card").parameters
    assert block["required"] == []
    assert block["properties"]["reason"]["enum"] == ["lost", "stolen", "fraud", "damaged", "other"]
    assert block["properties"]["reason"]["default"] == "lost"

    tx = registry.get("get_recent_transactions").parameters["properties"]
    assert tx["limit"] == {
        "type": "integer",
        "description": "How many transactions to return, newest first (1 to 20).",
        "default": 5,
        "minimum": 1,
        "maximum": 20,
    }
    mfa = registry.get("send_mfa_code").parameters["properties"]["method"]
    assert mfa["enum"] == ["sms", "email"]
    fraud = registry.get("create_fraud_case").parameters
    assert fraud["required"] == ["description"]
    assert fraud["properties"]["transaction_ids"]["items"] == {"type": "string"}
    escalate = registry.get("escalate_to_human").to_realtime()
    assert escalate["parameters"]["properties"]["priority"]["enum"] == ["normal", "high"]


# --------------------------------------------------------------------------------------------------
# Happy path
# --------------------------------------------------------------------------------------------------


async def test_happy_path(registry):
    profile = _profile()
    ctx = _ctx(profile)
    run = Runner(registry, ctx)

    verified = await run(
        "verify_client_identity", _identity(profile, full_name=f"  {profile['full_name'].upper()} ")
    )
    assert verified["verified"] is True and verified["mfa_required"] is True
    assert ctx.memory["identity_verified"] is True and ctx.memory["authenticated"] is False

    sent = await run("send_mfa_code", {})
    assert sent["sent"] is True and sent["method"] == profile["mfa"]["method"]
    assert sent["code_length"] == 6 and sent["expires_in_seconds"] == MFA_CODE_TTL_SECONDS
    if sent["method"] == "sms":
        assert sent["destination"] == "***-***-" + profile["phone_number"][-4:]
    else:
        assert sent["destination"] == profile["email"][0] + "***@" + profile["email"].split("@")[1]
    code = expected_mfa_code(SESSION, profile)
    assert len(code) == 6 and code.isdigit()
    assert code not in json.dumps(ctx.memory)  # only its hash is kept

    assert await run("verify_mfa_code", {"code": " ".join(code)}) == {"verified": True, "authenticated": True}
    assert ctx.memory["authenticated"] is True

    summary = await run("get_account_summary")
    assert [(a["type"], a["number_last4"], a["balance"]) for a in summary["accounts"]] == [
        (a["type"], a["number_last4"], a["balance"]) for a in profile["accounts"]
    ]
    assert summary["client_id"] == profile["client_id"]

    recent = await run("get_recent_transactions", {"limit": 3})
    assert recent["count"] == 3 and recent["total_available"] == len(profile["recent_transactions"])
    assert [t["id"] for t in recent["transactions"]] == [t["id"] for t in profile["recent_transactions"][:3]]
    checking = await run("get_recent_transactions", {"limit": 20, "account_type": "Checking"})
    assert checking["transactions"] and all(t["account_type"] == "checking" for t in checking["transactions"])
    assert (await run("get_recent_transactions"))["count"] == 5  # default limit

    card = profile["cards"][0]
    blocked = await run("block_card", {"card_last4": card["last4"], "reason": "stolen"})
    assert blocked["blocked"] is True and blocked["already_blocked"] is False
    assert blocked["reference"].startswith("BLK-") and blocked["reason"] == "stolen"
    assert ctx.memory["blocked_cards"][card["last4"]]["reference"] == blocked["reference"]
    again = await run("block_card", {"card_last4": card["last4"], "reason": "stolen"})
    assert again["already_blocked"] is True and again["reference"] == blocked["reference"]
    assert len(ctx.memory["blocked_cards"]) == 1
    summary = await run("get_account_summary")
    assert {c["last4"]: c["status"] for c in summary["cards"]}[card["last4"]] == "blocked"

    disputed = [t["id"] for t in profile["recent_transactions"] if t["amount"] < 0][:2]
    case = await run(
        "create_fraud_case", {"description": "I did not make these", "transaction_ids": disputed}
    )
    assert case["created"] is True and case["case_id"].startswith("FRD-")
    amounts = [abs(t["amount"]) for t in profile["recent_transactions"] if t["id"] in disputed]
    assert case["disputed_amount"] == round(sum(amounts), 2)
    assert ctx.memory["fraud_cases"][0]["case_id"] == case["case_id"]
    repeat = await run(
        "create_fraud_case", {"description": "I did not make these", "transaction_ids": disputed}
    )
    assert repeat["case_id"] == case["case_id"] and repeat["already_exists"] is True
    other = await run("create_fraud_case", {"description": "Another one", "transaction_ids": disputed[:1]})
    assert other["case_id"] != case["case_id"] and len(ctx.memory["fraud_cases"]) == 2

    escalation = await run("escalate_to_human", {"reason": "wants an investigator", "priority": "high"})
    assert escalation["escalated"] is True and escalation["queue_position"] >= 1
    assert escalation["estimated_wait_minutes"] > 0 and ctx.memory["escalation"]["priority"] == "high"

    assert await run("end_conversation", {"reason": "resolved"}) == {"ended": True, "reason": "resolved"}
    assert ctx.memory["conversation_ended"] is True
    run.assert_no_secrets(profile)


async def test_results_are_deterministic_per_session(registry):
    profile = _profile(seed=3)

    async def session(session_id: str) -> list:
        run = Runner(registry, _ctx(profile, session_id))
        await _authenticate(run, profile)
        block = await run("block_card", {"card_last4": profile["cards"][0]["last4"]})
        tx = profile["recent_transactions"][-1]["id"]
        case = await run("create_fraud_case", {"description": "not me", "transaction_ids": [tx]})
        return [block["reference"], case["case_id"]]

    assert await session("a") == await session("a")
    assert await session("a") != await session("b")
    assert expected_mfa_code("a", profile) != expected_mfa_code("b", profile)


async def test_other_identity_factors(registry):
    profile = _profile(seed=12)
    for factor in (
        {"ssn_last4": profile["verification"]["ssn_last4"]},
        {"client_id": profile["client_id"].lower().replace("-", " ")},
        {"client_id": profile["client_id"][3:]},
    ):
        ctx = _ctx(profile)
        args = {"full_name": profile["full_name"].lower(), **factor}
        assert (await registry.execute("verify_client_identity", args, ctx)).result["verified"] is True, (
            factor
        )


async def test_spelled_out_date_of_birth(registry):
    profile = _profile(seed=4)
    born = datetime.strptime(profile["verification"]["date_of_birth"], "%Y-%m-%d")
    for spoken in (born.strftime("%B %d, %Y"), born.strftime("%m/%d/%Y"), born.strftime("%d %B %Y")):
        ctx = _ctx(profile)
        args = {"full_name": profile["full_name"], "date_of_birth": spoken}
        assert (await registry.execute("verify_client_identity", args, ctx)).result["verified"] is True, (
            spoken
        )


# --------------------------------------------------------------------------------------------------
# Failures
# --------------------------------------------------------------------------------------------------


async def test_wrong_name_or_dob(registry):
    profile = _profile()
    ctx = _ctx(profile)
    run = Runner(registry, ctx)
    wrong_name = await run("verify_client_identity", _identity(profile, full_name="Someone Else"))
    assert wrong_name == {
        "verified": False,
        "locked": False,
        "attempts_remaining": 2,
        "reason": "the details do not match our records",
    }
    wrong_dob = await run("verify_client_identity", _identity(profile, date_of_birth="1900-01-01"))
    assert wrong_dob["verified"] is False and wrong_dob["attempts_remaining"] == 1
    assert ctx.memory["verification_attempts"] == 2 and ctx.memory["identity_verified"] is False
    # A right detail does not make up for a wrong one.
    mixed = _identity(profile, ssn_last4="0000" if profile["verification"]["ssn_last4"] != "0000" else "1111")
    assert (await run("verify_client_identity", mixed))["verified"] is False
    run.assert_no_secrets(profile)


async def test_name_alone_is_not_enough_and_does_not_count(registry):
    profile = _profile()
    ctx = _ctx(profile)
    result = await registry.execute("verify_client_identity", {"full_name": profile["full_name"]}, ctx)
    assert result.ok and result.result["verified"] is False and result.result["attempts_remaining"] == 3
    assert ctx.memory["verification_attempts"] == 0


async def test_lockout_after_three_failures(registry):
    profile = _profile()
    ctx = _ctx(profile)
    run = Runner(registry, ctx)
    for _ in range(2):
        assert (await run("verify_client_identity", _identity(profile, date_of_birth="1901-02-03")))[
            "locked"
        ] is False
    third = await run("verify_client_identity", _identity(profile, date_of_birth="1901-02-03"))
    assert third["locked"] is True and third["attempts_remaining"] == 0
    # Even the right details are refused now.
    fourth = await run("verify_client_identity", _identity(profile))
    assert fourth["verified"] is False and fourth["locked"] is True
    assert ctx.memory["identity_verified"] is False and ctx.memory["verification_locked"] is True
    assert (await run("send_mfa_code"))["error"] == "identity_not_verified"


async def test_no_profile(registry):
    ctx = _ctx(None)
    result = await registry.execute("verify_client_identity", {"full_name": "A B", "ssn_last4": "1234"}, ctx)
    assert result.result == {
        "verified": False,
        "reason": "no caller profile on this session; generate one with POST /api/v1/profiles/generate",
    }
    assert (await registry.execute("send_mfa_code", {}, ctx)).result["sent"] is False
    ctx.memory["authenticated"] = True
    assert (await registry.execute("get_account_summary", {}, ctx)).result["error"] == "no_caller_profile"


async def test_mfa_needs_identity_first(registry):
    profile = _profile()
    ctx = _ctx(profile)
    sent = (await registry.execute("send_mfa_code", {}, ctx)).result
    assert sent["sent"] is False and sent["error"] == "identity_not_verified"
    code = expected_mfa_code(SESSION, profile)
    check = (await registry.execute("verify_mfa_code", {"code": code}, ctx)).result
    assert check["verified"] is False and check["error"] == "no_code_sent"
    assert ctx.memory["authenticated"] is False


async def test_wrong_mfa_code_three_times_invalidates_it(registry):
    profile = _profile()
    ctx = _ctx(profile)
    run = Runner(registry, ctx)
    await run("verify_client_identity", _identity(profile))
    await run("send_mfa_code", {"method": "email"})
    code = expected_mfa_code(SESSION, profile)
    wrong = str((int(code) + 1) % 10**6).zfill(6)
    first = await run("verify_mfa_code", {"code": wrong})
    assert first == {
        "verified": False,
        "error": "wrong_code",
        "attempts_remaining": 2,
        "message": "The code does not match.",
    }
    assert (await run("verify_mfa_code", {"code": wrong}))["attempts_remaining"] == 1
    third = await run("verify_mfa_code", {"code": wrong})
    assert third["error"] == "code_invalidated" and third["attempts_remaining"] == 0
    # The right code no longer works once invalidated...
    assert (await run("verify_mfa_code", {"code": code}))["error"] == "code_invalidated"
    assert ctx.memory["authenticated"] is False
    # ...until a new one is sent.
    await run("send_mfa_code")
    assert (await run("verify_mfa_code", {"code": code}))["verified"] is True
    run.assert_no_secrets(profile)


async def test_mfa_sends_are_limited(registry):
    profile = _profile()
    run = Runner(registry, _ctx(profile))
    await run("verify_client_identity", _identity(profile))
    for _ in range(bt.MAX_MFA_SENDS):
        assert (await run("send_mfa_code"))["sent"] is True
    refused = await run("send_mfa_code")
    assert refused["sent"] is False and refused["error"] == "too_many_codes"


async def test_expired_mfa_code(registry, monkeypatch):
    profile = _profile()
    ctx = _ctx(profile)
    run = Runner(registry, ctx)
    clock = [1_000_000.0]
    monkeypatch.setattr(mfa.time, "time", lambda: clock[0])
    await run("verify_client_identity", _identity(profile))
    await run("send_mfa_code", {"method": "sms"})
    clock[0] += MFA_CODE_TTL_SECONDS + 1
    expired = await run("verify_mfa_code", {"code": expected_mfa_code(SESSION, profile)})
    assert expired["verified"] is False and expired["error"] == "code_expired"
    assert ctx.memory["authenticated"] is False
    await run("send_mfa_code", {"method": "sms"})
    clock[0] += MFA_CODE_TTL_SECONDS - 1
    assert (await run("verify_mfa_code", {"code": expected_mfa_code(SESSION, profile)}))["verified"] is True


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("get_account_summary", {}),
        ("get_recent_transactions", {"limit": 3}),
        ("block_card", {"card_last4": "1234"}),
        ("create_fraud_case", {"description": "not me"}),
    ],
)
async def test_not_authenticated(registry, name, args):
    profile = _profile()
    ctx = _ctx(profile)
    result = await registry.execute(name, args, ctx)
    assert result.ok and result.result == NOT_AUTHENTICATED
    assert result.result["message"] == (
        "The caller must be verified first (verify_client_identity, then the MFA code)."
    )
    # Identity alone (without the code) is not enough either.
    await registry.execute("verify_client_identity", _identity(profile), ctx)
    assert (await registry.execute(name, args, ctx)).result == NOT_AUTHENTICATED
    assert "blocked_cards" not in ctx.memory or not ctx.memory["blocked_cards"]


async def test_always_allowed_without_authentication(registry):
    ctx = _ctx(None)
    escalation = (await registry.execute("escalate_to_human", {"reason": "wants a person"}, ctx)).result
    assert escalation["escalated"] is True and escalation["priority"] == "normal"
    assert ctx.memory["escalation"]["reason"] == "wants a person"
    again = (await registry.execute("escalate_to_human", {"reason": "still waiting"}, ctx)).result
    assert again["already_escalated"] is True and again["queue_position"] == escalation["queue_position"]
    ended = (await registry.execute("end_conversation", None, ctx)).result
    assert ended == {"ended": True, "reason": "completed"} and ctx.memory["conversation_ended"] is True


# --------------------------------------------------------------------------------------------------
# Argument validation and edge cases
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("block_card", {"reason": "bored"}),
        ("send_mfa_code", {"method": "pigeon"}),
        ("escalate_to_human", {"reason": "x", "priority": "urgent"}),
        ("get_recent_transactions", {"limit": 0}),
        ("get_recent_transactions", {"limit": 21}),
        ("get_recent_transactions", {"limit": "five"}),
        ("verify_client_identity", {"date_of_birth": "1990-01-01"}),
        ("verify_mfa_code", {"code": ""}),
        ("create_fraud_case", {"description": "x", "transaction_ids": "TXN-1"}),
        ("end_conversation", {"unexpected": 1}),
    ],
)
async def test_argument_validation(registry, name, args):
    profile = _profile()
    ctx = _ctx(profile)
    ctx.memory["authenticated"] = True
    result = await registry.execute(name, args, ctx)
    assert not result.ok and result.error["type"] == "validation_error"


async def test_block_card_edge_cases(registry):
    profile = _profile()
    assert len(profile["cards"]) == 2  # seed 7 has a debit and a credit card
    ctx = _ctx(profile)
    run = Runner(registry, ctx)
    await _authenticate(run, profile)
    several = await run("block_card", {})
    assert several["blocked"] is False and {c["last4"] for c in several["cards"]} == {
        c["last4"] for c in profile["cards"]
    }
    unknown_last4 = next(
        f"{n:04d}" for n in range(10000) if f"{n:04d}" not in {c["last4"] for c in profile["cards"]}
    )
    unknown = await run("block_card", {"card_last4": unknown_last4})
    assert unknown["blocked"] is False and unknown_last4 in unknown["reason"]
    spoken = await run(
        "block_card", {"card_last4": f"ending {profile['cards'][1]['last4']}", "reason": "fraud"}
    )
    assert spoken["blocked"] is True and spoken["card_last4"] == profile["cards"][1]["last4"]
    assert ctx.memory["caller_profile"]["cards"][1]["status"] == "blocked"
    assert profile["cards"][1]["status"] == "active"  # the stored profile is untouched
    run.assert_no_secrets(profile)


async def test_fraud_case_validates_transaction_ids(registry):
    profile = _profile()
    ctx = _ctx(profile)
    run = Runner(registry, ctx)
    await _authenticate(run, profile)
    real = profile["recent_transactions"][0]["id"]
    bad = await run("create_fraud_case", {"description": "not me", "transaction_ids": [real, "TXN-NOPE"]})
    assert bad["created"] is False and bad["unknown_transaction_ids"] == ["TXN-NOPE"]
    assert "fraud_cases" not in ctx.memory or ctx.memory["fraud_cases"] == []
    lower = await run("create_fraud_case", {"description": "not me", "transaction_ids": [real.lower()]})
    assert lower["created"] is True and lower["transaction_ids"] == [real]
    no_tx = await run("create_fraud_case", {"description": "someone called pretending to be the bank"})
    assert no_tx["created"] is True and no_tx["transaction_ids"] == [] and no_tx["disputed_amount"] == 0


async def test_unknown_account_type(registry):
    profile = _profile()
    run = Runner(registry, _ctx(profile))
    await _authenticate(run, profile)
    result = await run("get_recent_transactions", {"account_type": "brokerage"})
    assert result["error"] == "unknown_account_type" and "checking" in result["available_account_types"]
    credit = await run("get_recent_transactions", {"account_type": "credit card", "limit": 20})
    assert credit["transactions"] and {t["account_type"] for t in credit["transactions"]} == {"credit_card"}


async def test_insurance_profile_summary(registry):
    profile = generate_profile(seed=9, scenario="insurance", now=NOW)
    run = Runner(registry, _ctx(profile))
    await _authenticate(run, profile)
    summary = await run("get_account_summary")
    assert summary["institution_name"] == "Contoso Insurance"
    assert [p["policy_number"] for p in summary["policies"]] == [
        p["policy_number"] for p in profile["policies"]
    ]
    assert (await run("block_card", {}))["blocked"] is False  # no cards
    run.assert_no_secrets(profile)


async def test_a_new_profile_resets_verification(registry):
    first, second = _profile(seed=1), _profile(seed=2)
    ctx = _ctx(first)
    run = Runner(registry, ctx)
    await _authenticate(run, first)
    ctx.memory.update(profile_memory(second))
    assert (await run("get_account_summary")) == NOT_AUTHENTICATED
    assert (await run("verify_mfa_code", {"code": expected_mfa_code(SESSION, second)}))["verified"] is False
