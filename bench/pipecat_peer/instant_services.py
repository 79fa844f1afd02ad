"""Instant STT, LLM and TTS services for the Pipecat side of bench/bench_vs_pipecat.py, each the
twin of what bench/plugins/instant_providers.py gives the service, so the two servers differ only in
their own machinery (transport, VAD, turn handling, frame plumbing), not in their providers:

- STT: a fixed transcript ("hello there") the moment the VAD says the caller stopped, built on
  Pipecat's SegmentedSTTService as a local recogniser would be (raw PCM, no WAV container).
- LLM: a fixed answer ("Sure thing.") streamed word by word at once, on every context.
- TTS: ``ms_per_word`` of silent PCM16 per word, in 100 ms chunks, at once.

Runs only in the bench's Pipecat venv (never imported by the service)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

from pipecat.frames.frames import (
    Frame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TranscriptionFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.llm_service import LLMService
from pipecat.services.settings import LLMSettings, STTSettings, TTSSettings
from pipecat.services.stt_service import SegmentedSTTService
from pipecat.services.tts_service import TTSService
from pipecat.utils.time import time_now_iso8601

# the settings Pipecat wants set (None: not applicable), or it logs an ERROR per service
LLM_FIELDS = (
    "model",
    "system_instruction",
    "temperature",
    "max_tokens",
    "top_p",
    "top_k",
    "frequency_penalty",
    "presence_penalty",
    "seed",
    "filter_incomplete_user_turns",
    "user_turn_completion_config",
)


class InstantSTT(SegmentedSTTService):
    """The caller always said ``text``; known as soon as the segment ends."""

    def __init__(self, text: str = "hello there", **kwargs) -> None:
        super().__init__(
            trailing_silence_secs=0,
            ttfs_p99_latency=0.0,  # instant: the end of turn never waits for a late transcript
            settings=STTSettings(model=None, language=None),
            **kwargs,
        )
        self.text = text

    @property
    def wants_wav_segments(self) -> bool:
        return False

    def can_generate_metrics(self) -> bool:
        return False

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame | None, None]:
        yield TranscriptionFrame(self.text, "", time_now_iso8601())


class InstantLLM(LLMService):
    """Answers every context with ``answer``, one word a text frame, without waiting."""

    def __init__(self, answer: str = "Sure thing.", **kwargs) -> None:
        unset = dict.fromkeys(LLM_FIELDS)
        super().__init__(settings=LLMSettings(**unset), **kwargs)
        self.words = answer.split(" ")

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            await self.push_frame(LLMFullResponseStartFrame())
            for i, word in enumerate(self.words):
                await self.push_frame(LLMTextFrame(word if i == 0 else f" {word}"))
            await self.push_frame(LLMFullResponseEndFrame())
        else:
            await self.push_frame(frame, direction)


class InstantTTS(TTSService):
    """``ms_per_word`` of silence per word of the text, as 100 ms chunks, produced at once."""

    def __init__(
        self, ms_per_word: int = 300, chunk_ms: int = 100, sample_rate: int = 24000, **kwargs
    ) -> None:
        super().__init__(
            push_start_frame=True,
            push_stop_frames=True,
            sample_rate=sample_rate,
            settings=TTSSettings(model=None, voice=None, language=None),
            **kwargs,
        )
        self.ms_per_word, self.chunk_ms, self.rate = ms_per_word, chunk_ms, sample_rate

    def can_generate_metrics(self) -> bool:
        return False

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        total = max(1, len(text.split())) * self.ms_per_word
        chunk = bytes(self.rate * self.chunk_ms // 1000 * 2)

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(max(1, total // self.chunk_ms)):
                yield chunk

        async for frame in self._stream_audio_frames_from_iterator(
            chunks(), in_sample_rate=self.rate, context_id=context_id
        ):
            yield frame
