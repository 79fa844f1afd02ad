"""LIFECYCLE_PLUGINS module for benchmarks: swap the speech and chat providers for instant ones,
so a benchmark against the real server measures the server (transport + engine), not pocketsphinx.

``BENCH_STT_LINES`` (``|``-separated, default "hello there"): what the scripted recogniser hears,
utterance after utterance, cycling; ``BENCH_CHAT=rules`` keeps the service's own (offline rules)
dialog instead of the scripted "Sure thing." - a test that needs the scenario's real tools."""

from __future__ import annotations

import os


def register(cycle) -> None:
    from voiceagent.conversation.testing import InstantTTS, ScriptedChat, ScriptedSTT
    from voiceagent.runtime import runtime

    async def swap() -> str:
        lines = [line for line in os.environ.get("BENCH_STT_LINES", "hello there").split("|") if line]
        runtime.stt = ScriptedSTT(lines * (1_000_000 // len(lines)), interim_after=10**9)
        runtime.tts = InstantTTS(
            sample_rate=24000, ms_per_word=int(os.environ.get("BENCH_MS_PER_WORD", "300")), chunk_ms=100
        )  # TTS services deliver ~100 ms chunks
        if os.environ.get("BENCH_CHAT") != "rules":
            runtime.chat = ScriptedChat(default="Sure thing.")
        return "benchmark: instant scripted providers"

    cycle.register("aoai", "bench-instant-providers", start=swap)
