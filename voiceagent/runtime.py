"""The process's voice runtime: providers built by the startup steps, and new conversations.

Steps: 2 (speech) builds the STT/TTS providers and their pools, 3 (aoai) the chat provider,
7 (warmup) fills the pools and pre-warms the model connection (``/ready`` ``warmup_results``).
Transports call :func:`new_conversation`; they never build providers themselves.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from django.conf import settings

from voiceagent import appconfig
from voiceagent.contributions import contributions
from voiceagent.conversation.engine import Conversation, EngineConfig
from voiceagent.conversation.providers import ChatProvider, STTProvider, TTSProvider, TurnModel
from voiceagent.conversation.specs import VoiceSpec
from voiceagent.conversation.turn_taking import TurnTaking
from voiceagent.observability import tracing

logger = logging.getLogger("voiceagent.runtime")


def turn_taking_settings() -> TurnTaking:
    """The global turn-taking settings as configured now (runtime-tunable keys included)."""
    get = appconfig.get
    return TurnTaking(
        min_interruption_ms=get("MIN_INTERRUPTION_MS"),
        endpointing_min_ms=get("VAD_SILENCE_TIMEOUT"),
        endpointing_max_ms=get("ENDPOINTING_MAX_MS"),
        echo_gate_db=get("ECHO_GATE_DB"),
        filler_after_ms=get("FILLER_AFTER_MS"),
        reprompt_after_s=get("REPROMPT_AFTER_S"),
        max_reprompts=get("MAX_REPROMPTS"),
        max_conversation_s=get("MAX_CONVERSATION_S"),
    )


class Runtime:
    def __init__(self) -> None:
        self.stt: STTProvider | None = None
        self.tts: TTSProvider | None = None
        self.chat: ChatProvider | None = None
        self.chat_warm: bool | None = None
        self.vad_factory = self._default_vad
        self.vad_label = "not built yet (startup step 2)"
        self.turn_model: TurnModel | None = None  # one per process, shared by its conversations
        self.turn_model_label = "none"

    @staticmethod
    def _default_vad():
        """The VAD for one new conversation, as VAD_PROVIDER says (Silero: one model per process,
        run on one inference thread that batches every conversation's frames)."""
        if settings.CONFIG.VAD_PROVIDER == "silero":
            from voiceagent.speech.silero_batch import BatchedSileroVAD

            return BatchedSileroVAD(16000, 20, threshold=appconfig.get("SILERO_THRESHOLD"))
        from voiceagent.speech.vad import VoiceActivityDetector

        return VoiceActivityDetector(16000, 20, aggressiveness=settings.CONFIG.VAD_AGGRESSIVENESS)

    # --- step 2: speech -------------------------------------------------------------------------
    async def start_speech(self) -> str:
        from voiceagent.speech.factory import build_speech_providers, build_turn_model, provider_label

        # first, so VAD_PROVIDER=silero without its model fails this step with that one line
        self.vad_label = provider_label(await asyncio.to_thread(self._default_vad))
        # on a thread: building loads the offline models (Piper's voice), ~0.5 s of blocking work
        self.stt, self.tts = await asyncio.to_thread(build_speech_providers, settings.CONFIG)
        # a missing model is one WARNING and the lexical rule alone, never a failed startup
        self.turn_model = await asyncio.to_thread(build_turn_model, settings.CONFIG, self.stt)
        self.turn_model_label = provider_label(self.turn_model) if self.turn_model is not None else "none"
        return (
            f"stt {provider_label(self.stt)}, tts {provider_label(self.tts)}, vad {self.vad_label}, "
            f"end of turn {self.turn_model_label} (pools fill during warmup)"
        )

    async def stop_stt(self) -> None:
        if self.stt is not None:
            await self.stt.close()
        close = getattr(self.turn_model, "close", None)
        if close is not None:
            await asyncio.to_thread(close)

    async def stop_tts(self) -> None:
        if self.tts is not None:
            await self.tts.close()

    # --- step 3: language model -------------------------------------------------------------------
    async def start_chat(self) -> str:
        from voiceagent.llm.factory import build_chat_provider

        self.chat = build_chat_provider(settings.CONFIG)
        return f"chat {self.chat.name}"

    async def stop_chat(self) -> None:
        if self.chat is not None:
            await self.chat.close()

    # --- step 7: warmup ---------------------------------------------------------------------------
    async def warmup(self, results: dict[str, Any]) -> str:
        async def warm_chat() -> bool:
            return bool(self.chat and await self.chat.warm())

        async def warm(provider) -> int:
            return int(await provider.warm()) if provider is not None else 0

        chat_ok, tts_ready, stt_ready = await asyncio.gather(
            warm_chat(), warm(self.tts), warm(self.stt), return_exceptions=True
        )
        results["openai"] = chat_ok is True
        results["tts_pool"] = tts_ready if isinstance(tts_ready, int) else 0
        results["stt_pool"] = stt_ready if isinstance(stt_ready, int) else 0
        self.chat_warm = results["openai"]
        for name, outcome in (("chat", chat_ok), ("tts", tts_ready), ("stt", stt_ready)):
            if isinstance(outcome, BaseException):
                logger.warning("warmup of %s failed: %s", name, outcome)
        return (
            f"chat warm={results['openai']}, tts pool {results['tts_pool']}, stt pool {results['stt_pool']}"
        )

    # --- readiness --------------------------------------------------------------------------------
    def llm_check(self) -> tuple[str, str]:
        if self.chat is None:
            return "unhealthy", "language-model client not created (startup step 3 failed)"
        if self.chat.name == "offline-rules":
            return (
                "healthy",
                "offline rules engine (deterministic dialog from fixtures/dialog; no language model)",
            )
        if self.chat_warm is False:
            return "unhealthy", f"{self.chat.name}: warmup call failed"
        return "healthy", f"{self.chat.name}" + ("" if self.chat_warm else " (not warmed yet)")

    def speech_check(self) -> tuple[str, str]:
        from voiceagent.speech.factory import provider_label
        from voiceagent.speech.pools import pool_metrics

        if self.stt is None or self.tts is None:
            return "unhealthy", "speech providers not created (startup step 2 failed)"
        pools = pool_metrics()
        detail = ", ".join(
            f"{kind} {provider_label(provider)} ({m['in_use']} in use, {m['warm']} idle, "
            f"{m['size']} kept warm, up to {m['max_size']})"
            for kind, provider, m in (("stt", self.stt, pools["stt"]), ("tts", self.tts, pools["tts"]))
        )
        return "healthy", f"{detail}, vad {self.vad_label}, end of turn {self.turn_model_label}"

    # --- conversations ----------------------------------------------------------------------------
    def engine_config(self) -> EngineConfig:
        config = settings.CONFIG
        return EngineConfig(
            language=appconfig.get("STT_LANGUAGE"),
            llm_timeout_s=config.LLM_TIMEOUT,
            max_tool_rounds=config.MAX_TOOL_ROUNDS,
            silence_timeout_ms=lambda: appconfig.get("VAD_SILENCE_TIMEOUT"),
            turn_taking=turn_taking_settings,
            recording=lambda: appconfig.get("RECORDING_ENABLED"),
            head_start=lambda: appconfig.get("REPLY_HEAD_START"),
            default_voice=lambda: VoiceSpec(
                appconfig.get("TTS_VOICE"), appconfig.get("TTS_STYLE"), appconfig.get("TTS_RATE")
            ),
        )

    def new_conversation(
        self,
        session_id: str,
        scenario: str,
        *,
        transport: str,
        agent: str | None = None,
        config: EngineConfig | None = None,
    ) -> Conversation:
        """A cascade conversation on this process's providers (the transport calls ``start()``)."""
        if self.stt is None or self.tts is None or self.chat is None:
            raise RuntimeError("voice runtime not started (startup steps 2-3)")
        return Conversation(
            session_id,
            scenario=scenario,
            agent=agent,
            transport=transport,
            directory=contributions.new("agent_directory"),
            store=contributions.new("session_store"),
            stt=self.stt,
            tts=self.tts,
            chat=self.chat,
            vad=self.vad_factory(),
            config=config or self.engine_config(),
            turn_model=self.turn_model,
        )

    # --- live (speech-to-speech) conversations ------------------------------------------------------
    def realtime_client(self):
        """The process's realtime voice client, built from configuration on first use.

        Raises ``ValueError`` when no realtime API is configured (there is no offline one).
        """
        client = self.__dict__.get("_realtime_client")
        if client is None:
            from voiceagent.llm.realtime import build_realtime_client

            client = self.__dict__["_realtime_client"] = build_realtime_client(settings.CONFIG)
        return client

    async def stop_realtime(self) -> None:
        """Release the realtime client (shutdown); open conversations keep their own sockets."""
        client = self.__dict__.pop("_realtime_client", None)
        if client is not None:
            await client.close()

    def live_config(self):
        from voiceagent.conversation.live import LiveConfig

        return LiveConfig(
            language=appconfig.get("STT_LANGUAGE"),
            max_tool_rounds=settings.CONFIG.MAX_TOOL_ROUNDS,
            silence_timeout_ms=lambda: appconfig.get("VAD_SILENCE_TIMEOUT"),
            turn_taking=turn_taking_settings,
            recording=lambda: appconfig.get("RECORDING_ENABLED"),
            default_voice=lambda: VoiceSpec(
                appconfig.get("TTS_VOICE"), appconfig.get("TTS_STYLE"), appconfig.get("TTS_RATE")
            ),
        )

    def new_live_conversation(
        self,
        session_id: str,
        scenario: str,
        *,
        transport: str,
        agent: str | None = None,
        config=None,
        client=None,
    ):
        """A live (speech-to-speech) conversation over the realtime voice API (the transport calls
        ``start()``). Same API and events as :meth:`new_conversation`; ``ValueError`` when no realtime
        API is configured."""
        from voiceagent.conversation.live import LiveConversation

        return LiveConversation(
            session_id,
            scenario=scenario,
            agent=agent,
            transport=transport,
            directory=contributions.new("agent_directory"),
            store=contributions.new("session_store"),
            client=client or self.realtime_client(),
            config=config or self.live_config(),
        )

    def new_monitor(self, session_id: str, scenario: str, *, transport: str):
        """A receive-only monitor of a call people handle (the AudioHook monitor): both channels
        transcribed by this process's recogniser, each with its own VAD, into the session's history."""
        from voiceagent.conversation.monitor import MonitorConversation

        if self.stt is None:
            raise RuntimeError("voice runtime not started (startup step 2)")
        return MonitorConversation(
            session_id,
            scenario=scenario,
            transport=transport,
            store=contributions.new("session_store"),
            stt=self.stt,
            vad_factory=self.vad_factory,
            config=self.engine_config(),
        )

    def conversation_mode(self, transport: str, requested: str | None = None) -> str:
        """Which engine runs a transport's conversation: ``"cascade"`` or ``"live"``.

        The spec fixes it per transport: the contact-center bridge always uses the realtime voice API;
        phone calls follow ``TELEPHONY_STREAMING_MODE`` (``VOICE_LIVE`` -> live; ``MEDIA`` and
        ``TRANSCRIPTION`` run the cascade); the browser gets what its ``config`` asked for.
        """
        if transport == "contactcenter":
            return "live"
        if transport == "phone":
            return "live" if settings.CONFIG.TELEPHONY_STREAMING_MODE == "VOICE_LIVE" else "cascade"
        if transport == "browser":
            mode = (requested or "cascade").strip().lower()
            if mode not in ("cascade", "live"):
                raise ValueError(f"conversation mode {requested!r} is not one of cascade, live")
            return mode
        raise ValueError(f"unknown transport {transport!r} (browser, phone, contactcenter)")

    def new_conversation_for(
        self, mode: str, session_id: str, scenario: str, *, transport: str, agent: str | None = None
    ):
        """``mode`` "cascade" (STT -> LLM -> TTS), "live" (the realtime voice API) or "monitor"
        (listen only: both sides of a call people handle, :meth:`new_monitor`).

        Transports map their own switch onto it: ``TELEPHONY_STREAMING_MODE=VOICE_LIVE``, the
        browser's ``mode: "live"``, the contact-center bridge.
        """
        kind = (mode or "cascade").strip().lower()
        if kind == "live":
            conversation = self.new_live_conversation(session_id, scenario, transport=transport, agent=agent)
        elif kind == "cascade":
            conversation = self.new_conversation(session_id, scenario, transport=transport, agent=agent)
        elif kind == "monitor":
            conversation = self.new_monitor(session_id, scenario, transport=transport)
        else:
            raise ValueError(f"conversation mode {mode!r} is not one of cascade, live, monitor")
        tracing.conversation_opened(conversation, kind)
        return conversation


runtime = Runtime()
