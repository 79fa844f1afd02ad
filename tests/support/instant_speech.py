"""LIFECYCLE_PLUGINS module for server tests: instant scripted speech (STT and TTS) in place of
pocketsphinx and espeak-ng, while the chat provider stays the configured one (a local OpenAI
peer, say), so a test of the transports or the chat client does not wait for offline models."""

from __future__ import annotations


def register(cycle) -> None:
    from voiceagent.conversation.testing import InstantTTS, ScriptedSTT
    from voiceagent.runtime import runtime

    async def swap() -> str:
        runtime.stt = ScriptedSTT(["hello there"] * 1000, interim_after=10**9)
        runtime.tts = InstantTTS(sample_rate=24000, ms_per_word=50, chunk_ms=100)
        return "tests: instant scripted speech (chat unchanged)"

    cycle.register("aoai", "tests-instant-speech", start=swap)
