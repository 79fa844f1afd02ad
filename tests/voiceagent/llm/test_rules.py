"""The offline rules engine walked through every shipped scenario, with the ChatRequests the engine sends.

:class:`EngineLikeWalk` mirrors ``Conversation._respond``: the history is replayed as user and
assistant texts plus ``"Earlier, tool X returned: ..."`` system messages; within a turn each round
appends the assistant tool-call message and the ``tool`` results; non-handoff tools run through the
real tool registry (the built-in banking tools) on the session memory; a handoff answers
``{"handoff": true, "from", "to", "type"}``, an announced one ends the turn with the target's
greeting, a discrete one lets the new agent continue the turn.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agents_app.builtin_tools import BUILTIN_TOOL_NAMES, expected_mfa_code, register_builtin_tools
from agents_app.definitions import load_definitions
from agents_app.profiles import generate_profile, profile_memory
from voiceagent.conversation.engine import resolve_tools
from voiceagent.conversation.providers import ChatChunk, ChatRequest, ProviderError
from voiceagent.conversation.specs import HandoffMap
from voiceagent.conversation.tools import ToolContext, ToolRegistry, execute_spec, resolve_handoff
from voiceagent.llm.rules import DialogError, RulesChat, normalize, spoken_date, spoken_digits

ROOT = Path(__file__).resolve().parents[3]
NOW = 1_790_000_000  # pins the demo profiles' dates
DIGIT_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september",
          "october", "november", "december"]  # fmt: skip


def spoken(code: str) -> str:
    return " ".join(DIGIT_WORDS[int(d)] for d in code)


@pytest.fixture(scope="module")
def definitions():
    result = load_definitions(ROOT / "fixtures", known_tools=BUILTIN_TOOL_NAMES)
    assert not result.errors, result.errors
    return result


@pytest.fixture(scope="module")
def registry():
    reg = ToolRegistry()
    register_builtin_tools(reg)
    return reg


@pytest.fixture
def chat():
    return RulesChat()


@dataclass
class TurnResult:
    spoken: list[tuple[str, str]] = field(default_factory=list)  # (agent, text)
    calls: list[tuple[str, str, dict]] = field(default_factory=list)  # (agent, tool, args)
    results: dict[str, Any] = field(default_factory=dict)  # tool -> result (last of the turn)
    handoffs: list[tuple[str, str, str]] = field(default_factory=list)  # (from, to, type)
    requests: list[ChatRequest] = field(default_factory=list)
    chunks: list[list[ChatChunk]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return " ".join(t for _, t in self.spoken)

    @property
    def tools(self) -> list[str]:
        return [name for _, name, _ in self.calls]

    def args(self, tool: str) -> dict:
        return next(a for _, name, a in self.calls if name == tool)


class EngineLikeWalk:
    def __init__(self, chat, definitions, registry, scenario: str, memory: dict, session_id: str = "walk-1"):
        self.chat = chat
        self.scenario = definitions.scenarios[scenario]
        self.agents = definitions.agents
        self.registry = registry
        self.handoff_map = HandoffMap.build(self.scenario, self.agents)
        self.active = self.scenario.start_agent
        self.memory = memory
        self.session_id = session_id
        self.history: list[dict] = []
        self.visited: set[str] = {self.active}

    def tools(self, agent: str):
        return resolve_tools(self.agents[agent], self.handoff_map, self.registry, self.agents)

    def _messages(self, agent: str) -> list[dict]:
        messages = [{"role": "system", "content": f"You are {agent}."}]
        for turn in self.history:
            if turn["role"] in ("user", "assistant"):
                messages.append({"role": turn["role"], "content": turn["content"]})
            else:
                messages.append(
                    {"role": "system", "content": f"Earlier, tool {turn['tool']} returned: {turn['content']}"}
                )
        return messages

    async def say(self, text: str) -> TurnResult:
        out = TurnResult()
        self.history.append({"role": "user", "content": text})
        agent = self.active
        messages = self._messages(agent)
        for _round in range(5):
            spec = self.agents[agent]
            tools = self.tools(agent)
            request = ChatRequest(
                messages=[dict(m) for m in messages],
                tools=[t.to_openai() for t in tools],
                model=spec.model,
                temperature=spec.temperature,
                agent=agent,
                scenario=self.scenario.name,
                memory=self.memory,
            )
            out.requests.append(request)
            chunks = [c async for c in self.chat.stream(request)]
            out.chunks.append(chunks)
            assert chunks[-1].done and sum(c.done for c in chunks) == 1
            reply = "".join(c.text for c in chunks)
            calls = [call for c in chunks for call in c.tool_calls]
            if reply:
                out.spoken.append((agent, reply))
            if not calls:
                break
            messages.append(
                {
                    "role": "assistant",
                    "content": reply or None,
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments},
                        }
                        for c in calls
                    ],
                }
            )
            by_name = {t.name: t for t in tools}
            handoffs = [c for c in calls if self.handoff_map.is_handoff_tool(c.name)]
            ctx = ToolContext(
                session_id=self.session_id, agent=agent, scenario=self.scenario.name, memory=self.memory
            )
            for call in calls:
                out.calls.append((agent, call.name, json.loads(call.arguments)))
                if call in handoffs:
                    continue
                assert call.name in by_name, f"{agent} called {call.name}, which is not offered"
                outcome = await execute_spec(by_name[call.name], call.arguments, ctx)
                content = outcome.to_model_content()
                out.results[call.name] = json.loads(content)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
                self.history.append({"role": "tool", "tool": call.name, "content": content})
            if not handoffs:
                continue
            call = handoffs[0]
            handoff = resolve_handoff(self.handoff_map, agent, call.name, json.loads(call.arguments))
            assert handoff is not None, f"{call.name} from {agent} is no handoff"
            result = {
                "handoff": True,
                "from": handoff.from_agent,
                "to": handoff.to_agent,
                "type": handoff.type,
            }
            content = json.dumps(result)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
            self.history.append({"role": "tool", "tool": call.name, "content": content})
            out.handoffs.append((handoff.from_agent, handoff.to_agent, handoff.type))
            returning = handoff.to_agent in self.visited
            self.visited.add(handoff.to_agent)
            self.active = agent = handoff.to_agent
            if handoff.type == "announced":
                target = self.agents[agent]
                line = target.return_greeting if returning and target.return_greeting else target.greeting
                out.spoken.append((agent, line))
                break
            messages[0] = {"role": "system", "content": f"You are {agent}."}
        else:
            pytest.fail("more than 5 tool rounds")
        if out.text:
            self.history.append({"role": "assistant", "content": out.text})
        return out


def banking_walk(chat, definitions, registry, seed: int, session_id: str = "walk-1"):
    profile = generate_profile(seed, "banking", now=NOW)
    memory = profile_memory(profile)
    return EngineLikeWalk(chat, definitions, registry, "banking", memory, session_id), profile


# --------------------------------------------------------------------------------------------------
# Banking
# --------------------------------------------------------------------------------------------------


async def test_banking_lost_card_walk(chat, definitions, registry):
    walk, profile = banking_walk(chat, definitions, registry, seed=7)
    debit, credit = profile["cards"]

    t = await walk.say("i lost my card")
    assert t.tools == ["handoff_auth_agent"]
    assert t.handoffs == [("concierge", "auth_agent", "announced")]
    assert "identity verification" in t.text
    assert t.spoken[-1] == ("auth_agent", definitions.agents["auth_agent"].greeting)
    assert walk.active == "auth_agent"
    # the concierge streamed its reply in several chunks before the tool call
    first = t.chunks[0]
    assert sum(1 for c in first if c.text) >= 3
    assert [bool(c.tool_calls) for c in first if not c.text] == [True, False]
    assert first[-1].finish_reason == "tool_calls"

    # demo shortcut: verification from the session's caller profile
    t = await walk.say("yes thats me")
    assert t.tools == ["verify_client_identity", "send_mfa_code"]
    assert t.args("verify_client_identity") == {
        "full_name": profile["full_name"],
        "date_of_birth": profile["verification"]["date_of_birth"],
    }
    assert t.results["verify_client_identity"]["verified"] is True
    assert t.results["send_mfa_code"]["sent"] is True
    assert "6 digit code by text message" in t.text
    assert profile["phone_number"][-4:] == "".join(re.findall(r"\d", t.text.split("ending in")[1])[:4])
    assert walk.memory["identity_verified"] is True and not walk.memory.get("authenticated")

    # a wrong code first
    t = await walk.say("my code is one two three four five six")
    if expected_mfa_code(walk.session_id, profile) != "123456":
        assert t.tools == ["verify_mfa_code"]
        assert t.results["verify_mfa_code"]["error"] == "wrong_code"
        assert "doesn't match" in t.text

    code = expected_mfa_code(walk.session_id, profile)
    t = await walk.say(f"my code is {spoken(code)}")
    assert t.args("verify_mfa_code") == {"code": code}
    assert walk.memory["authenticated"] is True
    # discrete handoff to the cards team, which carries on in the same turn
    assert t.handoffs == [("auth_agent", "cards_agent", "discrete")]
    assert t.tools == ["verify_mfa_code", "handoff_cards_agent"]
    assert walk.active == "cards_agent"
    assert "Which card is it" in t.text and "debit card ending in" in t.text and "credit card" in t.text
    assert t.spoken[-1][0] == "cards_agent"

    t = await walk.say("my debit card")
    assert t.tools == ["block_card"]
    assert t.args("block_card") == {"card_last4": debit["last4"], "reason": "lost"}
    assert t.results["block_card"]["blocked"] is True
    assert (
        debit["last4"] in walk.memory["blocked_cards"] and credit["last4"] not in walk.memory["blocked_cards"]
    )
    assert "is now blocked" in t.text and "five to seven business days" in t.text

    t = await walk.say("thats all thank you")
    assert t.tools == ["handoff_concierge"]
    assert t.handoffs == [("cards_agent", "concierge", "announced")]
    assert t.spoken[-1] == ("concierge", definitions.agents["concierge"].return_greeting)

    t = await walk.say("no goodbye")
    assert t.tools == ["end_conversation"]
    assert walk.memory["conversation_ended"] is True
    assert "Goodbye" in t.text


async def test_banking_stolen_card_fraud_walk(chat, definitions, registry):
    walk, profile = banking_walk(chat, definitions, registry, seed=7, session_id="walk-fraud")
    credit = profile["cards"][1]

    t = await walk.say("my credit card was stolen")
    assert t.tools == ["handoff_auth_agent"]
    assert "suspected fraud" in t.text
    assert "stolen" in t.args("handoff_auth_agent")["reason"]

    # full spoken name and date of birth instead of the demo shortcut
    dob = profile["verification"]["date_of_birth"]  # e.g. 1949-07-03
    year, month, day = (int(x) for x in dob.split("-"))
    name = normalize(profile["full_name"])
    t = await walk.say(f"my name is {name} born {MONTHS[month - 1]} {day} {year}")
    assert t.args("verify_client_identity") == {"full_name": name.title(), "date_of_birth": dob}
    assert t.tools == ["verify_client_identity", "send_mfa_code"]

    code = expected_mfa_code(walk.session_id, profile)
    t = await walk.say(spoken(code))
    # stolen -> fraud team (discrete), who block the named card straight away
    assert t.handoffs == [("auth_agent", "fraud_agent", "discrete")]
    assert t.tools == ["verify_mfa_code", "handoff_fraud_agent", "block_card"]
    assert t.args("block_card") == {"card_last4": credit["last4"], "reason": "stolen"}
    assert "charges you don't recognise" in t.text

    t = await walk.say("yes")
    assert t.tools == ["get_recent_transactions"]
    txs = t.results["get_recent_transactions"]["transactions"]
    assert len(txs) == 3
    assert txs[0]["merchant"] in t.text and "Which one don't you recognise" in t.text

    t = await walk.say("i dont recognise the second one")
    assert t.tools[0] == "create_fraud_case"
    args = t.args("create_fraud_case")
    assert args["transaction_ids"] == [txs[1]["id"]]
    assert txs[1]["merchant"] in args["description"]
    case = t.results["create_fraud_case"]
    assert case["created"] is True
    spelled = " ".join(ch for ch in case["case_id"] if ch.isalnum())
    assert spelled in t.text
    involved = case["cards_involved"]
    if involved and involved[0] != credit["last4"]:
        assert t.tools == ["create_fraud_case", "block_card"]  # the other card involved is blocked too
    else:
        assert t.tools == ["create_fraud_case"]

    t = await walk.say("thats all")
    assert t.handoffs == [("fraud_agent", "concierge", "announced")]
    t = await walk.say("goodbye")
    assert t.tools == ["end_conversation"]


async def test_single_card_is_blocked_without_asking(chat, definitions, registry):
    walk, profile = banking_walk(chat, definitions, registry, seed=3, session_id="walk-one-card")
    assert len(profile["cards"]) == 1
    await walk.say("hello i think i lost my card")
    await walk.say("verify me")
    t = await walk.say("the code is " + spoken(expected_mfa_code(walk.session_id, profile)))
    assert t.tools == ["verify_mfa_code", "handoff_cards_agent", "block_card"]
    assert t.args("block_card") == {"card_last4": profile["cards"][0]["last4"], "reason": "lost"}
    assert "is now blocked" in t.text


async def test_verification_by_name_then_date_and_failures(chat, definitions, registry):
    walk, profile = banking_walk(chat, definitions, registry, seed=4, session_id="walk-name")
    await walk.say("what is my balance")
    assert walk.active == "auth_agent"

    t = await walk.say("my name is grace muller")  # "Müller" on file: accents fold
    assert t.tools == []
    assert "Grace Muller" in t.text and "date of birth" in t.text

    t = await walk.say("january first two thousand")  # wrong date
    assert t.args("verify_client_identity") == {"full_name": "Grace Muller", "date_of_birth": "2000-01-01"}
    assert t.results["verify_client_identity"]["verified"] is False
    assert "2 attempts left" in t.text

    year, month, day = (int(x) for x in profile["verification"]["date_of_birth"].split("-"))
    t = await walk.say(f"{MONTHS[month - 1]} {day} {year}")
    assert t.results["verify_client_identity"]["verified"] is True
    assert t.tools == ["verify_client_identity", "send_mfa_code"]

    t = await walk.say(f"my code is {spoken(expected_mfa_code(walk.session_id, profile))}")
    # balance -> cards team, who look up the accounts
    assert t.tools == ["verify_mfa_code", "handoff_cards_agent", "get_account_summary"]
    checking = profile["accounts"][0]
    assert "checking account ending in " + " ".join(checking["number_last4"]) in t.text


async def test_verification_locks_after_three_failures(chat, definitions, registry):
    walk, _ = banking_walk(chat, definitions, registry, seed=7, session_id="walk-lock")
    await walk.say("i lost my card")
    for attempt in range(3):
        t = await walk.say("my name is john smith born march third nineteen eighty five")
        assert t.args("verify_client_identity") == {"full_name": "John Smith", "date_of_birth": "1985-03-03"}
    assert t.results["verify_client_identity"]["locked"] is True
    assert t.handoffs == [("auth_agent", "concierge", "announced")]
    assert "couldn't verify your identity" in t.text


async def test_already_verified_caller_goes_straight_to_the_specialists(chat, definitions, registry):
    walk, profile = banking_walk(chat, definitions, registry, seed=7, session_id="walk-verified")
    walk.memory["authenticated"] = True
    t = await walk.say("my card was stolen")
    assert t.handoffs == [("concierge", "fraud_agent", "announced")]
    t = await walk.say("the credit one")
    assert t.args("block_card") == {"card_last4": profile["cards"][1]["last4"], "reason": "stolen"}
    t = await walk.say("can you check my transactions")
    assert t.tools == ["get_recent_transactions"]
    t = await walk.say("none of them are mine")
    ids = [tx["id"] for tx in t.results.get("get_recent_transactions", {}).get("transactions", [])]
    args = t.args("create_fraud_case")
    assert len(args["transaction_ids"]) == 3 and not ids
    assert t.results["create_fraud_case"]["created"] is True


PHONE_SPOKEN = "five five five one two three four five six seven"  # as the offline recogniser hears it


@pytest.mark.parametrize(
    "said",
    [
        f"my phone number is {PHONE_SPOKEN}",
        PHONE_SPOKEN,
        "my number is 555 123 4567",
        "call me on my cell 5551234567",
    ],
)
async def test_a_phone_number_given_as_identification_is_not_taken_for_a_code(
    chat, definitions, registry, said
):
    walk, _ = banking_walk(chat, definitions, registry, seed=7, session_id="walk-phone")
    await walk.say("i lost my card")
    assert walk.active == "auth_agent"
    t = await walk.say(said)
    assert t.tools == [], t.text  # no verify_mfa_code: no code was asked for
    assert "can't verify you with a phone number" in t.text and "full name and your date of birth" in t.text
    assert "code" not in t.text

    t = await walk.say(f"this is jane doe my phone number is {PHONE_SPOKEN}")  # the name is kept
    assert t.tools == [] and "Jane Doe" in t.text and "what is your date of birth" in t.text

    t = await walk.say("one two three four five six")  # digits, but no code was sent yet
    assert t.tools == [] and "date of birth" in t.text


async def test_a_code_is_taken_only_once_sent_and_only_of_its_length(chat, definitions, registry):
    walk, profile = banking_walk(chat, definitions, registry, seed=7, session_id="walk-code-length")
    await walk.say("i lost my card")
    t = await walk.say("yes thats me")
    assert t.tools == ["verify_client_identity", "send_mfa_code"]
    length = t.results["send_mfa_code"]["code_length"]
    code = expected_mfa_code(walk.session_id, profile)
    assert len(code) == length == 6

    for wrong_length in (f"my phone number is {PHONE_SPOKEN}", "my code is " + spoken(code[:4])):
        t = await walk.say(wrong_length)
        assert t.tools == [], t.text  # not checked: a wrong length costs no attempt
        assert f"your code has {length}" in t.text and "digits" in t.text
    assert walk.memory["_mfa_challenge"]["attempts"] == 0

    t = await walk.say(f"my code is {spoken(code)}")
    assert t.tools[:2] == ["verify_mfa_code", "handoff_cards_agent"]
    assert walk.memory["authenticated"] is True


async def test_human_and_general_questions(chat, definitions, registry):
    walk, _ = banking_walk(chat, definitions, registry, seed=7, session_id="walk-human")
    t = await walk.say("what are your opening hours")
    assert t.tools == [] and "Monday to Friday" in t.text
    t = await walk.say("can i talk to a real person")
    assert t.tools == ["escalate_to_human"]
    assert "position" in t.text and "minutes" in t.text


@pytest.mark.parametrize("scenario", ["banking", "default"])
async def test_a_goodbye_inside_a_request_does_not_end_the_call(chat, definitions, registry, scenario):
    """Whisper on a loaded machine heard "... a payment on my account I don't recognise" as "... I
    don't care goodbye", and the call ended. A farewell ends it on its own or among closing words
    only."""
    walk = EngineLikeWalk(chat, definitions, registry, scenario, {}, f"walk-bye-{scenario}")
    t = await walk.say("theres a payment on my account i dont care goodbye")
    assert "end_conversation" not in t.tools and not walk.memory.get("conversation_ended")
    t = await walk.say("alright goodbye then")
    assert t.tools == ["end_conversation"] and walk.memory["conversation_ended"] is True


# --------------------------------------------------------------------------------------------------
# Default scenario
# --------------------------------------------------------------------------------------------------


async def test_default_scenario_walk(chat, definitions, registry):
    memory = {"caller_first_name": "Sam"}
    walk = EngineLikeWalk(chat, definitions, registry, "default", memory)
    t = await walk.say("hello")
    assert t.tools == [] and t.text == "Hello, Sam! How can I help you today?"
    t = await walk.say("how are you")
    assert "doing well" in t.text
    t = await walk.say("specialist please")
    assert t.handoffs == [("assistant", "specialist", "announced")]
    assert t.spoken[-1] == ("specialist", definitions.agents["specialist"].greeting)
    t = await walk.say("how does compound interest work")
    assert "compound interest works" in t.text and walk.active == "specialist"
    t = await walk.say("back to the assistant")
    assert t.handoffs == [("specialist", "assistant", "discrete")]
    assert t.spoken[-1] == ("assistant", "I'm back with you. What else can I help you with?")
    t = await walk.say("can i talk to the specialist again")
    assert t.tools == ["handoff_specialist"]
    assert t.spoken[-1] == ("specialist", definitions.agents["specialist"].return_greeting)
    t = await walk.say("why")
    assert t.tools == [] and "Good question" in t.text
    t = await walk.say("thats all")
    assert walk.active == "assistant"
    t = await walk.say("bye")
    assert t.tools == ["end_conversation"]


# --------------------------------------------------------------------------------------------------
# Properties of the engine
# --------------------------------------------------------------------------------------------------


def request(
    text: str, agent: str = "concierge", scenario: str = "banking", tools=(), memory=None, messages=None
):
    msgs = messages or [{"role": "system", "content": "x"}, {"role": "user", "content": text}]
    return ChatRequest(
        messages=msgs,
        tools=[
            {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in tools
        ],
        agent=agent,
        scenario=scenario,
        memory=memory or {},
    )


async def run(chat, req) -> tuple[str, list]:
    chunks = [c async for c in chat.stream(req)]
    return "".join(c.text for c in chunks), [call for c in chunks for call in c.tool_calls]


async def test_a_tool_not_offered_is_never_called(chat):
    text, calls = await run(chat, request("i lost my card", tools=["handoff_fraud_agent"]))
    assert calls == []
    assert text.startswith("Sorry, I didn't catch that")
    # with the tool offered the same words hand off
    text, calls = await run(chat, request("i lost my card", tools=["handoff_auth_agent"]))
    assert [c.name for c in calls] == ["handoff_auth_agent"]
    # after a tool result too: the rule that applies needs send_mfa_code, not offered -> fallback
    msgs = [
        {"role": "user", "content": "verify me"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "verify_client_identity", "arguments": "{}"}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"verified": True, "full_name": "A B"})},
    ]  # fmt: skip
    text, calls = await run(chat, request("", agent="auth_agent", messages=msgs, tools=["verify_mfa_code"]))
    assert calls == []
    assert text == "All done. Is there anything else I can help you with?"


async def test_unknown_input_gets_the_agent_fallback(chat):
    all_tools = list(BUILTIN_TOOL_NAMES) + [
        "handoff_auth_agent",
        "handoff_fraud_agent",
        "handoff_cards_agent",
    ]
    text, calls = await run(chat, request("purple elephants dance", tools=all_tools))
    assert calls == [] and "I lost my card" in text
    text, calls = await run(chat, request("purple elephants dance", agent="auth_agent", tools=all_tools))
    assert calls == [] and "full name" in text
    text, calls = await run(chat, request("purple elephants dance", agent="nobody", tools=all_tools))
    assert text == "Sorry, I didn't quite get that. Could you say it another way?"


async def test_missing_dialog_file_uses_the_generic_dialog(chat):
    text, calls = await run(chat, request("hello", scenario="insurance"))
    assert text == "Hello! How can I help?"
    text, calls = await run(
        chat,
        request("please transfer me to the claims agent", scenario="insurance", tools=["handoff_to_agent"]),
    )
    assert json.loads(calls[0].arguments)["target_agent"] == "claims"
    text, calls = await run(chat, request("blah", scenario="../etc/passwd"))
    assert "offline rules engine" in text


async def test_deterministic(chat):
    req = request("i lost my card", tools=["handoff_auth_agent"])
    first = [c async for c in chat.stream(req)]
    second = [c async for c in RulesChat().stream(req)]
    assert first == second
    assert first[-2].tool_calls[0].id.startswith("call_")


async def test_reply_streams_in_word_chunks(chat):
    chunks = [c async for c in chat.stream(request("what can you do"))]
    pieces = [c.text for c in chunks if c.text]
    assert len(pieces) > 3
    assert all(p.endswith(" ") for p in pieces[:-1]) and not pieces[-1].endswith(" ")
    assert all(len(p.split()) <= 4 for p in pieces)
    assert chunks[-1] == ChatChunk(done=True, finish_reason="stop")


async def test_nothing_to_answer_is_silent(chat):
    chunks = [c async for c in chat.stream(request("", messages=[{"role": "system", "content": "x"}]))]
    assert chunks == [ChatChunk(done=True, finish_reason="stop")]


async def test_warm_and_invalid_files(tmp_path):
    assert await RulesChat().warm() is True
    (tmp_path / "good.yaml").write_text("agents:\n  a:\n    fallback: hi\n")
    (tmp_path / "bad.yaml").write_text("agents:\n  a:\n    rules:\n      - match: '('\n        reply: x\n")
    chat = RulesChat(tmp_path)
    assert await chat.warm() is False
    with pytest.raises(DialogError, match=r"bad\.yaml: agents\.a\.rules\[0\]\.match: invalid regex"):
        chat.dialog("bad")
    with pytest.raises(ProviderError):
        await run(chat, request("x", scenario="bad"))
    text, _ = await run(chat, request("x", scenario="good", agent="a"))
    assert text == "hi"
    # edits are picked up
    (tmp_path / "good.yaml").write_text("agents:\n  a:\n    fallback: hello again\n")
    text, _ = await run(chat, request("x", scenario="good", agent="a"))
    assert text == "hello again"


@pytest.mark.parametrize(
    "source, message",
    [
        ("patterns:\n  no: x\n", "names must be strings"),
        ("agents:\n  a:\n    rules:\n      - reply: '{{ x'\n", "invalid template"),
        ("agents:\n  a:\n    rules:\n      - match: x\n", "needs a `reply`"),
        ("agents:\n  a:\n    rules:\n      - match: '@nope'\n        reply: x\n", "unknown pattern"),
        ("agents:\n  a:\n    after_tool:\n      t: {match: x, reply: y}\n", "no `match`"),
        (
            "agents:\n  a:\n    rules:\n      - reply: x\n        tool: {name: 'bad name'}\n",
            "invalid tool name",
        ),
        ("agents:\n  a:\n    rulez: []\n", "unknown keys"),
    ],
)
def test_validation_messages(tmp_path, source, message):
    (tmp_path / "s.yaml").write_text(source)
    with pytest.raises(DialogError, match=re.escape(message)):
        RulesChat(tmp_path).dialog("s")


def test_spoken_helpers():
    assert spoken_digits("my code is four two oh one") == "4201"
    assert spoken_digits("oh no") == ""
    assert spoken_digits("double seven 3") == "773"
    assert spoken_date("march third nineteen eighty five") == "1985-03-03"
    assert spoken_date("the twenty first of june two thousand and three") == "2003-06-21"
    assert spoken_date("born on 7/3/1949") == "1949-07-03"
    assert spoken_date("march") == ""
    assert normalize("That's  José's CARD!") == "thats joses card"


def test_engine_can_run_the_dialog_concurrently():
    """Stateless: interleaved sessions on one provider do not affect each other."""

    async def main():
        chat = RulesChat()
        reqs = [
            request("i lost my card", tools=["handoff_auth_agent"]),
            request("goodbye", tools=["end_conversation"]),
        ]
        results = await asyncio.gather(*(run(chat, r) for r in reqs * 5))
        assert {calls[0].name for _, calls in results} == {"handoff_auth_agent", "end_conversation"}

    asyncio.run(main())


# --------------------------------------------------------------------------------------------------
# Through the real engine
# --------------------------------------------------------------------------------------------------


async def test_real_engine_banking_walk(definitions, registry):
    """The cascade engine (scripted STT, instant TTS) driving RulesChat through the lost-card walk."""
    import numpy as np

    from voiceagent.conversation.engine import Conversation, EngineConfig
    from voiceagent.conversation.session import InMemorySessionStore, SessionState
    from voiceagent.conversation.testing import EnergyVAD, InstantTTS, ScriptedSTT, StaticDirectory

    rate, frame = 16000, 320
    tone = (np.sin(np.arange(frame) * 2 * np.pi * 440 / rate) * 8000).astype("<i2").tobytes()
    silence = bytes(frame * 2)
    session_id = "engine-walk"
    profile = generate_profile(7, "banking", now=NOW)
    code = expected_mfa_code(session_id, profile)
    texts = [
        "i lost my card",
        "yes thats me",
        f"my code is {spoken(code)}",
        "my debit card",
        "thats all",
        "goodbye",
    ]

    scenario = definitions.scenarios["banking"]
    agents = [definitions.agents[name] for name in scenario.agents]
    store = InMemorySessionStore()
    await store.save(
        SessionState(
            session_id=session_id, scenario="banking", active_agent="", memory=profile_memory(profile)
        )
    )
    conv = Conversation(
        session_id,
        scenario="banking",
        directory=StaticDirectory(agents, scenario, registry),
        store=store,
        stt=ScriptedSTT(texts),
        tts=InstantTTS(ms_per_word=4, chunk_ms=20),
        chat=RulesChat(),
        vad=EnergyVAD(),
        registry=registry,
        config=EngineConfig(silence_timeout_ms=lambda: 200),
    )
    events: list = []

    async def read():
        async for event in conv.events():
            events.append(event)

    async def settled(count: int):
        async with asyncio.timeout(5):
            while True:
                finals = [i for i, e in enumerate(events) if e.kind == "Transcript" and e.final]
                if conv.closed or (
                    len(finals) >= count
                    and any(e.kind == "StateChange" and e.state == "listening" for e in events[finals[-1] :])
                    and conv.loop_time() >= conv.playback_end
                ):
                    break
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # the assistant's words are committed to the history

    await conv.start()
    reader = asyncio.create_task(read())
    try:
        await asyncio.sleep(0.3)  # the greeting
        for n, _ in enumerate(texts, start=1):
            for _ in range(10):
                conv.push_audio(tone, rate)
            for _ in range(60):  # 1.2 s: more than the agents' vad_silence_timeout_ms (900 at most)
                conv.push_audio(silence, rate)
            await settled(n)
    finally:
        await conv.close()
        await asyncio.wait_for(reader, 2)

    assert not [e for e in events if e.kind == "Error"], [e for e in events if e.kind == "Error"]
    tools = [e.name for e in events if e.kind == "ToolCall"]
    assert tools == [
        "handoff_auth_agent",
        "verify_client_identity",
        "send_mfa_code",
        "verify_mfa_code",
        "handoff_cards_agent",
        "block_card",
        "handoff_concierge",
        "end_conversation",
    ]
    assert all(e.ok for e in events if e.kind == "ToolCall")
    handoffs = [(e.from_agent, e.to_agent, e.type) for e in events if e.kind == "Handoff"]
    assert handoffs == [
        ("concierge", "auth_agent", "announced"),
        ("auth_agent", "cards_agent", "discrete"),
        ("cards_agent", "concierge", "announced"),
    ]
    state = await store.load(session_id)
    assert state.memory["authenticated"] is True
    assert list(state.memory["blocked_cards"]) == [profile["cards"][0]["last4"]]
    assert state.memory["conversation_ended"] is True
