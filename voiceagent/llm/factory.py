"""Choose the chat provider from configuration.

``LLM_PROVIDER`` (default ``auto``):

* ``auto``: Azure OpenAI when ``CLOUD_LLM_ENDPOINT`` is set, else the OpenAI-compatible server
  when ``OPENAI_BASE_URL`` is set, else the offline rules engine.
* ``azure`` / ``openai`` / ``rules``: that one; ``azure`` and ``openai`` need their settings.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from voiceagent.conversation.providers import ChatProvider

logger = logging.getLogger(__name__)

__all__ = ["PROVIDER_CHOICES", "build_chat_provider", "chat_provider_kind"]

PROVIDER_CHOICES = ("auto", "azure", "openai", "rules")


def chat_provider_kind(config: Mapping[str, Any]) -> str:
    """``"azure"``, ``"openai"`` or ``"rules"``: what :func:`build_chat_provider` builds."""
    choice = str(config.get("LLM_PROVIDER") or "auto").strip().lower()
    if choice not in PROVIDER_CHOICES:
        raise ValueError(f"LLM_PROVIDER={choice!r} is not one of {', '.join(PROVIDER_CHOICES)}")
    if choice == "auto":
        if config.get("CLOUD_LLM_ENDPOINT"):
            return "azure"
        if config.get("OPENAI_BASE_URL"):
            return "openai"
        return "rules"
    if choice == "azure" and not (config.get("CLOUD_LLM_ENDPOINT") and config.get("CLOUD_LLM_DEPLOYMENT")):
        raise ValueError("LLM_PROVIDER=azure needs CLOUD_LLM_ENDPOINT and CLOUD_LLM_DEPLOYMENT")
    if choice == "openai" and not (config.get("OPENAI_BASE_URL") and config.get("OPENAI_MODEL")):
        raise ValueError("LLM_PROVIDER=openai needs OPENAI_BASE_URL and OPENAI_MODEL")
    return choice


def build_chat_provider(config: Mapping[str, Any]) -> ChatProvider:
    """The configured :class:`ChatProvider` (raises ``ValueError`` for an impossible choice)."""
    kind = chat_provider_kind(config)
    provider: ChatProvider
    if kind == "azure":
        from voiceagent.llm.openai_chat import AzureOpenAIChat

        provider = AzureOpenAIChat.from_config(config)
    elif kind == "openai":
        from voiceagent.llm.openai_chat import OpenAIChat

        provider = OpenAIChat.from_config(config)
    else:
        from voiceagent.llm.rules import RulesChat

        provider = RulesChat()
    logger.info("chat provider: %s", provider.name)
    return provider
