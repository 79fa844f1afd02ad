"""LIFECYCLE_PLUGINS module for benchmarks: swap the speech and chat providers for instant ones,
so a benchmark against the real server measures the server (transport + engine), not pocketsphinx."""

from __future__ import annotations

import os


def register(cycle) -> None:
    from voiceagent.conversation.testing import InstantTTS, ScriptedChat, ScriptedSTT
    from voiceagent.runtime import runtime

    async def swap() -> str:
        runtime.stt = ScriptedSTT(["hello there"] * 1_000_000, interim_after=10**9)
        runtime.tts = InstantTTS(
            sample_rate=24000, ms_per_word=int(os.environ.get("BENCH_MS_PER_WORD", "300")), chunk_ms=100
        )  # TTS services deliver ~100 ms chunks
        runtime.chat = ScriptedChat(default="Sure thing.")
        return "benchmark: instant scripted providers"

    cycle.register("aoai", "bench-instant-providers", start=swap)
