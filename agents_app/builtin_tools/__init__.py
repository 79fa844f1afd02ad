"""Built-in demo tools of the banking scenario, and their registration.

The tools work only on the session's memory (``ctx.memory``); the caller is the profile that
:func:`agents_app.profiles.profile_memory` put there as ``memory["caller_profile"]``. No database,
no network, deterministic results. Importing this package registers them into the default tool
registry (source ``"builtin"``); :func:`register_builtin_tools` registers them into another one.
No result ever contains the SSN digits, the date of birth or the one-time code.

One module per domain: :mod:`.identity` (identity verification), :mod:`.demo_caller` (a session
without a profile gets its demo caller), :mod:`.mfa` (the one-time code), :mod:`.banking`
(accounts, cards, fraud cases), :mod:`.escalation` (a human, the end of the call); :mod:`.caller`
holds what they share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from agents_app.builtin_tools.banking import (
    MAX_TRANSACTIONS,
    block_card,
    create_fraud_case,
    get_account_summary,
    get_recent_transactions,
)
from agents_app.builtin_tools.caller import NOT_AUTHENTICATED
from agents_app.builtin_tools.demo_caller import attach_demo_caller
from agents_app.builtin_tools.escalation import end_conversation, escalate_to_human
from agents_app.builtin_tools.identity import MAX_VERIFICATION_ATTEMPTS, verify_client_identity
from agents_app.builtin_tools.mfa import (
    MAX_MFA_ATTEMPTS,
    MAX_MFA_SENDS,
    MFA_CODE_TTL_SECONDS,
    expected_mfa_code,
    send_mfa_code,
    verify_mfa_code,
)
from voiceagent.conversation.tools import (
    REGISTRY,
    ToolRegistry,
    ToolSpec,
    tool_spec_from_function,
)

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "MAX_MFA_ATTEMPTS",
    "MAX_MFA_SENDS",
    "MAX_VERIFICATION_ATTEMPTS",
    "MFA_CODE_TTL_SECONDS",
    "NOT_AUTHENTICATED",
    "builtin_tool_specs",
    "expected_mfa_code",
    "register_builtin_tools",
]

_FUNCTIONS: tuple[Callable[..., Any], ...] = (
    verify_client_identity,
    attach_demo_caller,
    send_mfa_code,
    verify_mfa_code,
    get_account_summary,
    get_recent_transactions,
    block_card,
    create_fraud_case,
    escalate_to_human,
    end_conversation,
)
BUILTIN_TOOL_NAMES: tuple[str, ...] = tuple(fn.__name__ for fn in _FUNCTIONS)

# Schema constraints the type hints cannot express: {tool: {parameter: extra keywords}}.
_SCHEMA_EXTRAS: dict[str, dict[str, dict[str, Any]]] = {
    "verify_client_identity": {"full_name": {"minLength": 1}},
    "verify_mfa_code": {"code": {"minLength": 1}},
    "get_recent_transactions": {"limit": {"minimum": 1, "maximum": MAX_TRANSACTIONS}},
    "create_fraud_case": {"description": {"minLength": 1}, "transaction_ids": {"maxItems": 20}},
}


def _build_spec(fn: Callable[..., Any]) -> ToolSpec:
    spec = tool_spec_from_function(fn, source="builtin")
    extras = _SCHEMA_EXTRAS.get(spec.name)
    if not extras:
        return spec
    parameters = {**spec.parameters, "properties": dict(spec.parameters["properties"])}
    for pname, extra in extras.items():
        parameters["properties"][pname] = {**parameters["properties"][pname], **extra}
    return dataclasses.replace(spec, parameters=parameters)


_SPECS: tuple[ToolSpec, ...] = tuple(_build_spec(fn) for fn in _FUNCTIONS)


def builtin_tool_specs() -> list[ToolSpec]:
    """The :class:`ToolSpec` of every built-in tool (built once; treat them as read-only)."""
    return list(_SPECS)


def register_builtin_tools(registry: ToolRegistry = REGISTRY) -> list[str]:
    """Register the built-in tools into ``registry``; idempotent (no change, no version bump).

    Returns :data:`BUILTIN_TOOL_NAMES`.
    """
    for spec in _SPECS:
        if registry.get(spec.name) is not spec:
            registry.register(spec, replace=True)
    return list(BUILTIN_TOOL_NAMES)


register_builtin_tools(REGISTRY)
