"""The fault suite's wires: the local peers, each behind a fault proxy, and the settings that point
the service at them (through the proxies). The fixtures in conftest.py start them."""

from __future__ import annotations

from dataclasses import dataclass, field

from fault_proxy import FaultProxy
from mcp_peers import PeerServer
from openai_peer import OpenAIPeer
from realtime_peer import RealtimePeer, Say

LLM_TIMEOUT_S = 3.0  # the service's LLM_TIMEOUT here: a slowed chat model goes past it quickly
MCP_TIMEOUT_S = 3.0  # MCP_SERVER_CRM_TIMEOUT
MCP_SERVER = "crm"  # its tools are registered as crm_<tool>
REALTIME_KEY = "faults-realtime-key"
REALTIME_ANSWER = "Sure, I can help you with that today."


def realtime_answer() -> Say:
    """The realtime peer's answer: a few audio deltas over about half a second."""
    return Say(REALTIME_ANSWER, chunks=4, audio_ms=800, interval=0.1)


@dataclass
class Faults:
    """The peers, each behind its proxy, and the MCP server's record of tool calls."""

    chat: OpenAIPeer
    chat_proxy: FaultProxy
    realtime: RealtimePeer
    realtime_proxy: FaultProxy
    mcp: PeerServer
    mcp_proxy: FaultProxy
    mcp_calls: list = field(default_factory=list)

    @property
    def proxies(self) -> tuple[FaultProxy, ...]:
        return (self.chat_proxy, self.realtime_proxy, self.mcp_proxy)

    def heal(self) -> None:
        """Every wire healthy, every peer on its default behaviour, nothing scripted."""
        for proxy in self.proxies:
            proxy.reset()
        self.chat.reset()
        self.realtime.reset()
        self.realtime.default = realtime_answer()
        self.mcp_calls.clear()

    def env(self) -> dict[str, str]:
        """The deployment's settings that point it at the peers through the proxies."""
        return {
            "OPENAI_BASE_URL": f"{self.chat_proxy.url}/v1",
            "OPENAI_MODEL": "peer-model",
            "LLM_TIMEOUT": f"{LLM_TIMEOUT_S:g}",
            "REALTIME_PROVIDER": "voicelive",
            "CLOUD_REALTIME_VOICE_ENDPOINT": self.realtime_proxy.url,
            "CLOUD_REALTIME_VOICE_API_KEY": REALTIME_KEY,
            "CLOUD_REALTIME_VOICE_MODEL": "gpt-realtime",
            "MCP_ENABLED_SERVERS": MCP_SERVER,
            f"MCP_SERVER_{MCP_SERVER.upper()}_URL": f"{self.mcp_proxy.url}/mcp",
            f"MCP_SERVER_{MCP_SERVER.upper()}_TRANSPORT": "streamable-http",
            f"MCP_SERVER_{MCP_SERVER.upper()}_TIMEOUT": f"{MCP_TIMEOUT_S:g}",
        }
