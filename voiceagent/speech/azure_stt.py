"""Azure AI Speech to text (:class:`AzureSTT`): continuous recognition over a push stream, one
recognizer per utterance (credentials, SpeechConfig and failure messages: :mod:`.azure_auth`).

Threading (architecture rule 6): the SDK calls our recognizer handlers on its own native threads;
every handler only hands its data to the event loop with ``loop.call_soon_threadsafe``. Starting
and stopping a recognizer blocks, so it runs on thread pools owned by the provider, sized to its
client pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import azure.cognitiveservices.speech as speechsdk

from voiceagent.conversation.providers import ProviderError
from voiceagent.speech.azure_auth import (
    AadTokenProvider,
    AzureSpeechAuth,
    AzureSpeechClient,
    cancellation_message,
    redact,
    setting,
)
from voiceagent.speech.pools import ClientPool, PoolTimeout, session_limit

__all__ = ["STT_SAMPLE_RATE", "AzureSTT", "AzureSTTStream"]

logger = logging.getLogger("voiceagent.speech.azure")

STT_SAMPLE_RATE: Final = 16000


class _RecognitionSlot:
    """Permit for one concurrent recognition (the ``stt`` pool's client).

    A recognizer is bound to its push stream, so each utterance builds its own (sub-millisecond,
    no network until started); the pool bounds concurrent recognitions by its maximum (the
    session limit; ``STT_POOL_SIZE`` is only its warm size) and gives ``/pools`` its figures.
    """

    __slots__ = ()


class AzureSTTStream:
    """One utterance: a push stream feeding a continuous SpeechRecognizer (implements STTStream)."""

    def __init__(self, provider: AzureSTT, slot: _RecognitionSlot, on_interim: Callable[[str], None]):
        self._provider = provider
        self._slot = slot
        self._loop = asyncio.get_running_loop()
        self._on_interim = on_interim
        self._texts: list[str] = []
        self._error: str | None = None
        self._stopped = asyncio.Event()
        self._closing = False
        self._released = False
        self._push: Any = None
        self._recognizer: Any = None

    # --- SDK threads -> loop -----------------------------------------------------------------
    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # loop closed: nobody is listening any more
            self._loop.call_soon_threadsafe(fn, *args)

    def _on_recognizing(self, evt: Any) -> None:
        self._post(self._deliver_interim, evt.result.text or "")

    def _on_recognized(self, evt: Any) -> None:
        if evt.result.reason == speechsdk.ResultReason.RecognizedSpeech and evt.result.text:
            self._post(self._texts.append, evt.result.text)

    def _on_canceled(self, evt: Any) -> None:
        details = evt.cancellation_details
        if details.reason == speechsdk.CancellationReason.Error:
            msg = cancellation_message("Azure speech recognition failed", details, self._provider.secrets)
            self._post(self._set_error, msg)
        self._post(self._stopped.set)

    def _on_stopped(self, evt: Any) -> None:
        self._post(self._stopped.set)

    # --- loop side -------------------------------------------------------------------------------
    def _deliver_interim(self, text: str) -> None:
        if self._closing or not text:
            return
        try:
            self._on_interim(" ".join([*self._texts, text]))
        except Exception:
            logger.exception("on_interim callback failed")

    def _set_error(self, msg: str) -> None:
        if self._error is None:
            self._error = msg
            logger.warning("%s", msg)

    # --- blocking SDK work (provider's executor) -----------------------------------------------
    def _start(self, config: speechsdk.SpeechConfig, language: str) -> None:
        fmt = speechsdk.audio.AudioStreamFormat(
            samples_per_second=STT_SAMPLE_RATE, bits_per_sample=16, channels=1
        )
        self._push = speechsdk.audio.PushAudioInputStream(stream_format=fmt)
        config.speech_recognition_language = language
        config.set_property(
            speechsdk.PropertyId.Speech_SegmentationSilenceTimeoutMs,
            str(self._provider.segmentation_silence_timeout_ms),
        )
        recognizer = speechsdk.SpeechRecognizer(
            speech_config=config, audio_config=speechsdk.audio.AudioConfig(stream=self._push)
        )
        recognizer.recognizing.connect(self._on_recognizing)
        recognizer.recognized.connect(self._on_recognized)
        recognizer.canceled.connect(self._on_canceled)
        recognizer.session_stopped.connect(self._on_stopped)
        self._recognizer = recognizer
        recognizer.start_continuous_recognition_async().get()

    def _dispose(self, stop: bool) -> None:
        """Stop recognition if it is still running and detach our handlers (blocking)."""
        recognizer, self._recognizer = self._recognizer, None
        if recognizer is None:
            return
        try:
            if stop:
                recognizer.stop_continuous_recognition_async().get()
        finally:
            for signal in (
                recognizer.recognizing,
                recognizer.recognized,
                recognizer.canceled,
                recognizer.session_stopped,
            ):
                signal.disconnect_all()

    # --- STTStream -------------------------------------------------------------------------------
    async def push(self, pcm16: bytes) -> None:
        """Copy audio into the SDK's push-stream buffer (non-blocking)."""
        if self._error is not None:
            raise ProviderError(self._error)
        if self._closing or not pcm16:
            return
        self._push.write(bytes(pcm16))

    async def finish(self) -> str:
        """Close the audio stream, wait for the final result, return all recognised text."""
        if self._closing:
            raise ProviderError("speech recognition stream already finished or cancelled")
        self._closing = True
        try:
            self._push.close()  # end of audio: the service flushes the last phrase, then stops
            try:
                await asyncio.wait_for(self._stopped.wait(), self._provider.finish_timeout)
            except TimeoutError:
                logger.warning(
                    "Azure speech recognition: no final result within %g s", self._provider.finish_timeout
                )
        finally:
            self._teardown()
            await self._release()
        if self._error is not None:
            raise ProviderError(self._error)
        return " ".join(t.strip() for t in self._texts if t.strip())

    async def cancel(self) -> None:
        if self._closing:
            return
        self._closing = True
        with contextlib.suppress(Exception):
            self._push.close()
        self._teardown()
        await self._release()

    def _teardown(self) -> None:
        """Dispose of the recognizer in the background: after a connection failure the SDK's stop
        can take ~10 s, which must not hold up the turn (or the pool slot)."""
        if self._recognizer is None:
            return
        future = self._loop.run_in_executor(
            self._provider._teardown_executor, self._dispose, not self._stopped.is_set()
        )
        future.add_done_callback(_log_teardown_failure)

    async def _release(self) -> None:
        if not self._released:
            self._released = True
            await self._provider.pool.release(self._slot)


def _log_teardown_failure(future: asyncio.Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.warning("Azure speech recognition did not stop cleanly: %s", future.exception())


class AzureSTT(AzureSpeechClient):
    """STTProvider on Azure AI Speech: continuous recognition over a push stream per utterance."""

    name = "azure-speech"
    sample_rate = STT_SAMPLE_RATE

    def __init__(
        self,
        auth: AzureSpeechAuth,
        pool_size: int = 4,
        acquire_timeout: float = 2.0,
        segmentation_silence_timeout_ms: int = 500,
        finish_timeout: float = 5.0,
        endpoint: str | None = None,
        token_provider: AadTokenProvider | None = None,
        max_size: int | None = None,
    ):
        super().__init__(auth, endpoint, token_provider)
        self.segmentation_silence_timeout_ms = int(segmentation_silence_timeout_ms)
        self.finish_timeout = finish_timeout
        self.pool: ClientPool[_RecognitionSlot] = ClientPool(
            "stt",
            _RecognitionSlot,
            size=pool_size,
            provider=self.name,
            acquire_timeout=acquire_timeout,
            max_size=max_size,
        )
        # Blocking SDK calls (start, stop) run here, never on the loop. One thread per recognition
        # the pool admits (+1), made lazily and reused: threads never outgrow the session limit.
        threads = self.pool.max_size + 1
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="azure-stt")
        self._teardown_executor = ThreadPoolExecutor(threads, thread_name_prefix="azure-stt-stop")

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any], token_provider: AadTokenProvider | None = None
    ) -> AzureSTT:
        return cls(
            AzureSpeechAuth.from_config(config),
            pool_size=int(setting(config, "STT_POOL_SIZE", 4)),
            acquire_timeout=float(setting(config, "POOL_ACQUIRE_TIMEOUT", 2.0)),
            segmentation_silence_timeout_ms=int(setting(config, "VAD_SILENCE_TIMEOUT", 500)),
            token_provider=token_provider,
            max_size=session_limit(config),
        )

    async def warm(self) -> int:
        """Fetch a token when using managed identity; fill the slot pool. No audio is sent."""
        if self._tokens is not None:
            await self._tokens.token()
        return await self.pool.warm()

    async def open(self, language: str, on_interim: Callable[[str], None]) -> AzureSTTStream:
        try:
            slot = await self.pool.acquire()
        except PoolTimeout as exc:
            raise ProviderError(f"speech recognition busy: {exc} (Azure recognitions)") from None
        except RuntimeError as exc:
            raise ProviderError(f"speech recognition unavailable: {exc}") from None
        stream = AzureSTTStream(self, slot, on_interim)
        try:
            config = await self.speech_config()
            await asyncio.get_running_loop().run_in_executor(self._executor, stream._start, config, language)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await stream.cancel()
            if isinstance(exc, ProviderError) or not isinstance(exc, Exception):
                raise
            raise ProviderError(
                redact(f"Azure speech recognition could not start: {exc}", self.secrets)
            ) from None
        return stream

    async def close(self) -> None:
        await self.pool.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._teardown_executor.shutdown(wait=False)
        await self._close_tokens()
