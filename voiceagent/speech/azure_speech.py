"""Azure AI Speech: streaming recognition (:class:`AzureSTT`) and synthesis (:class:`AzureTTS`).

Auth (:class:`AzureSpeechAuth`): ``CLOUD_SPEECH_KEY`` + ``CLOUD_SPEECH_REGION``, or, with
``USE_DEFAULT_CREDENTIAL=true`` and ``CLOUD_SPEECH_RESOURCE_ID``, a Microsoft Entra token from
azure-identity passed as the authorization token ``aad#<resource_id>#<token>`` with the region.

Threading (architecture rule 6): the SDK runs its own native threads and calls our event handlers
on them; every handler only hands its data to the event loop with ``loop.call_soon_threadsafe``.
SDK calls that block (``.get()`` on its futures, creating recognizers/synthesizers) run on a
thread pool owned by the provider, sized to its client pool.

Failures (unreachable service, bad key, throttling) surface as :class:`ProviderError` carrying the
SDK's cancellation reason, code and first line of details, with any configured secret redacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final
from xml.sax.saxutils import escape, quoteattr

import azure.cognitiveservices.speech as speechsdk

from voiceagent.config import ConfigError
from voiceagent.conversation.providers import ProviderError
from voiceagent.conversation.specs import VoiceSpec, configured_voice, resolve_voice
from voiceagent.speech.audio import FrameChunker, frame_bytes_for
from voiceagent.speech.pools import ClientPool, PoolTimeout, session_limit

__all__ = [
    "AZURE_SPEECH_SCOPE",
    "AadTokenProvider",
    "AzureSTT",
    "AzureSpeechAuth",
    "AzureTTS",
    "build_speech_config",
    "build_ssml",
    "resolve_voice",
]

logger = logging.getLogger("voiceagent.speech.azure")

AZURE_SPEECH_SCOPE: Final = "https://cognitiveservices.azure.com/.default"
DEFAULT_VOICE: Final = "en-US-AvaMultilingualNeural"
TTS_SAMPLE_RATE: Final = 24000  # Raw24Khz16BitMonoPcm
STT_SAMPLE_RATE: Final = 16000
TOKEN_REFRESH_MARGIN_S: Final = 300.0
_RATE = re.compile(r"^[+-]?\d{1,3}(\.\d+)?%$|^(x-slow|slow|medium|fast|x-fast|default)$")
_STYLE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_LOCALE = re.compile(r"^([a-z]{2,3}-[A-Za-z0-9]{2,4})(?:-|$)")
# Characters XML 1.0 does not allow at all (not even escaped): the service would reject the SSML.
_XML_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


# --------------------------------------------------------------------------------------------------
# Auth and configuration (pure: no network)
# --------------------------------------------------------------------------------------------------


def _setting(config: Mapping[str, Any], name: str, default: Any = None) -> Any:
    value = config.get(name)
    return default if value is None or value == "" else value


@dataclass(frozen=True)
class AzureSpeechAuth:
    """Which credentials reach the Speech resource. ``mode`` is ``"key"`` or ``"aad"``.

    Managed identity (``aad``) wins when ``USE_DEFAULT_CREDENTIAL`` is on and the resource id is
    known (as for the chat LLM); otherwise the key is used. The key never appears in ``repr``.
    """

    region: str
    key: str | None = field(default=None, repr=False)
    resource_id: str | None = None
    use_default_credential: bool = False

    def __post_init__(self) -> None:
        if not self.region:
            raise ConfigError("CLOUD_SPEECH_REGION is required for Azure Speech")
        if not self.key and not (self.use_default_credential and self.resource_id):
            if self.use_default_credential:
                raise ConfigError(
                    "CLOUD_SPEECH_RESOURCE_ID is required for Azure Speech with USE_DEFAULT_CREDENTIAL "
                    "(or set CLOUD_SPEECH_KEY)"
                )
            raise ConfigError("Azure Speech needs CLOUD_SPEECH_KEY or USE_DEFAULT_CREDENTIAL=true")

    @property
    def mode(self) -> str:
        return "aad" if self.use_default_credential and self.resource_id else "key"

    @staticmethod
    def is_configured(config: Mapping[str, Any]) -> bool:
        """True when the configuration asks for Azure Speech (region plus key or default credential)."""
        return bool(
            _setting(config, "CLOUD_SPEECH_REGION")
            and (_setting(config, "CLOUD_SPEECH_KEY") or _setting(config, "USE_DEFAULT_CREDENTIAL", False))
        )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> AzureSpeechAuth:
        return cls(
            region=_setting(config, "CLOUD_SPEECH_REGION") or "",
            key=_setting(config, "CLOUD_SPEECH_KEY"),
            resource_id=_setting(config, "CLOUD_SPEECH_RESOURCE_ID"),
            use_default_credential=bool(_setting(config, "USE_DEFAULT_CREDENTIAL", False)),
        )

    @property
    def secrets(self) -> tuple[str, ...]:
        return (self.key,) if self.key else ()


class AadTokenProvider:
    """Microsoft Entra tokens for Speech, formatted ``aad#<resource_id>#<token>``, cached until
    five minutes before expiry. ``credential`` is any azure-identity (sync) ``TokenCredential``;
    ``DefaultAzureCredential`` by default, created on first use. ``get_token`` runs in a thread.
    """

    def __init__(self, resource_id: str, credential: Any = None):
        self.resource_id = resource_id
        self._credential = credential
        self._owns_credential = credential is None
        self._value: str | None = None
        self._expires_on = 0.0
        self._lock: asyncio.Lock | None = None

    async def token(self) -> str:
        if self._value and time.time() < self._expires_on - TOKEN_REFRESH_MARGIN_S:
            return self._value
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._value and time.time() < self._expires_on - TOKEN_REFRESH_MARGIN_S:
                return self._value
            try:
                access = await asyncio.to_thread(self._fetch)
            except Exception as exc:
                raise ProviderError(f"Azure Speech: could not get a Microsoft Entra token: {exc}") from None
            self._value = f"aad#{self.resource_id}#{access.token}"
            self._expires_on = float(access.expires_on)
            return self._value

    def _fetch(self) -> Any:
        if self._credential is None:
            from azure.identity import DefaultAzureCredential

            self._credential = DefaultAzureCredential()
        return self._credential.get_token(AZURE_SPEECH_SCOPE)

    async def close(self) -> None:
        if self._owns_credential and self._credential is not None:
            credential, self._credential = self._credential, None
            with contextlib.suppress(Exception):
                await asyncio.to_thread(credential.close)


def build_speech_config(
    auth: AzureSpeechAuth, authorization_token: str | None = None, endpoint: str | None = None
) -> speechsdk.SpeechConfig:
    """A SpeechConfig for ``auth`` (no network). ``endpoint`` overrides the regional endpoint."""
    if auth.mode == "aad":
        if not authorization_token:
            raise ProviderError("Azure Speech: managed-identity auth needs a token")
        if endpoint:
            config = speechsdk.SpeechConfig(endpoint=endpoint)
            config.authorization_token = authorization_token
            return config
        return speechsdk.SpeechConfig(auth_token=authorization_token, region=auth.region)
    if endpoint:
        return speechsdk.SpeechConfig(subscription=auth.key, endpoint=endpoint)
    return speechsdk.SpeechConfig(subscription=auth.key, region=auth.region)


def _redact(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "<redacted>")
    return text


def _cancellation_message(what: str, details: Any, secrets: tuple[str, ...]) -> str:
    """One line from SDK cancellation details: reason, error code, first line of the details."""
    reason = getattr(getattr(details, "reason", None), "name", None) or str(getattr(details, "reason", ""))
    code = getattr(details, "error_code", None) or getattr(details, "code", None)
    code_name = getattr(code, "name", None) or (str(code) if code is not None else "")
    text = (getattr(details, "error_details", "") or "").strip().splitlines()
    parts = [p for p in (reason, code_name, text[0] if text else "") if p]
    return _redact(f"{what}: {' / '.join(parts) or 'cancelled'}", secrets)


# --------------------------------------------------------------------------------------------------
# SSML
# --------------------------------------------------------------------------------------------------


def build_ssml(text: str, voice: VoiceSpec) -> str:
    """SSML for one text: ``<voice>``, ``<mstts:express-as style>`` when set, ``<prosody rate>``.

    The text is XML-escaped (markup in it is spoken, never interpreted); characters XML cannot
    carry are dropped. A style or rate that is not a plain token/percentage is left out (logged)
    rather than sent, since the service would reject the whole request.
    """
    name = _XML_INVALID.sub("", (voice.name or DEFAULT_VOICE).strip()) or DEFAULT_VOICE
    m = _LOCALE.match(name)
    lang = m.group(1) if m else "en-US"
    body = escape(_XML_INVALID.sub("", text))
    rate = (voice.rate or "").strip()
    if rate and rate.lower() not in ("default", "medium", "+0%", "0%"):
        if _RATE.match(rate):
            body = f"<prosody rate={quoteattr(rate)}>{body}</prosody>"
        else:
            logger.warning("ignoring invalid TTS rate %r", rate[:40])
    style = (voice.style or "").strip()
    if style:
        if _STYLE.match(style):
            body = f"<mstts:express-as style={quoteattr(style)}>{body}</mstts:express-as>"
        else:
            logger.warning("ignoring invalid TTS style %r", style[:40])
    return (
        '<speak version="1.0" xmlns="http://www.w3.org/2001/10/synthesis" '
        f'xmlns:mstts="https://www.w3.org/2001/mstts" xml:lang={quoteattr(lang)}>'
        f"<voice name={quoteattr(name)}>{body}</voice></speak>"
    )


# --------------------------------------------------------------------------------------------------
# Speech to text
# --------------------------------------------------------------------------------------------------


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
            msg = _cancellation_message("Azure speech recognition failed", details, self._provider.secrets)
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


class AzureSTT:
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
        self.auth = auth
        self.segmentation_silence_timeout_ms = int(segmentation_silence_timeout_ms)
        self.finish_timeout = finish_timeout
        self.endpoint = endpoint
        self._tokens = token_provider or (
            AadTokenProvider(auth.resource_id or "") if auth.mode == "aad" else None
        )
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
            pool_size=int(_setting(config, "STT_POOL_SIZE", 4)),
            acquire_timeout=float(_setting(config, "POOL_ACQUIRE_TIMEOUT", 2.0)),
            segmentation_silence_timeout_ms=int(_setting(config, "VAD_SILENCE_TIMEOUT", 500)),
            token_provider=token_provider,
            max_size=session_limit(config),
        )

    @property
    def secrets(self) -> tuple[str, ...]:
        return self.auth.secrets

    async def speech_config(self) -> speechsdk.SpeechConfig:
        token = await self._tokens.token() if self._tokens is not None else None
        return build_speech_config(self.auth, token, self.endpoint)

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
                _redact(f"Azure speech recognition could not start: {exc}", self.secrets)
            ) from None
        return stream

    async def close(self) -> None:
        await self.pool.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._teardown_executor.shutdown(wait=False)
        if self._tokens is not None:
            await self._tokens.close()


# --------------------------------------------------------------------------------------------------
# Text to speech
# --------------------------------------------------------------------------------------------------


class _PooledSynthesizer:
    """A SpeechSynthesizer (no audio device) whose streamed chunks go to the current lease's sink."""

    def __init__(self, config: speechsdk.SpeechConfig):
        config.set_speech_synthesis_output_format(speechsdk.SpeechSynthesisOutputFormat.Raw24Khz16BitMonoPcm)
        self.synth = speechsdk.SpeechSynthesizer(speech_config=config, audio_config=None)
        self.token: str | None = config.authorization_token or None
        self.sink: Callable[[bytes], None] | None = None
        self.synth.synthesizing.connect(self._on_synthesizing)

    def _on_synthesizing(self, evt: Any) -> None:  # SDK thread
        sink = self.sink
        if sink is not None:
            data = evt.result.audio_data
            if data:
                sink(bytes(data))

    def speak(self, ssml: str) -> Any:  # blocking
        return self.synth.speak_ssml_async(ssml).get()

    def stop(self) -> None:  # blocking
        self.synth.stop_speaking_async().get()

    def close(self) -> None:
        self.sink = None
        self.synth.synthesizing.disconnect_all()


class AzureTTS:
    """TTSProvider on Azure AI Speech: SSML in, 24 kHz PCM16 chunks out while synthesis runs."""

    name = "azure-speech"
    sample_rate = TTS_SAMPLE_RATE

    def __init__(
        self,
        auth: AzureSpeechAuth,
        pool_size: int = 4,
        acquire_timeout: float = 2.0,
        default_voice: VoiceSpec | Callable[[], VoiceSpec] | None = None,
        endpoint: str | None = None,
        token_provider: AadTokenProvider | None = None,
        chunk_ms: int = 100,
        max_size: int | None = None,
    ):
        self.auth = auth
        self.endpoint = endpoint
        self.chunk_bytes = frame_bytes_for(TTS_SAMPLE_RATE, chunk_ms)
        self._default_voice = default_voice or VoiceSpec()
        self._tokens = token_provider or (
            AadTokenProvider(auth.resource_id or "") if auth.mode == "aad" else None
        )
        self.pool: ClientPool[_PooledSynthesizer] = ClientPool(
            "tts",
            self._new_synthesizer,
            size=pool_size,
            provider=self.name,
            acquire_timeout=acquire_timeout,
            closer=self._close_synthesizer,
            max_size=max_size,
        )
        # ``speak`` blocks a thread for a whole synthesis: one thread per synthesizer the pool
        # admits (+1 to make or close one), made lazily and reused, never beyond the session limit.
        self._executor = ThreadPoolExecutor(self.pool.max_size + 1, thread_name_prefix="azure-tts")

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any], token_provider: AadTokenProvider | None = None
    ) -> AzureTTS:
        return cls(
            AzureSpeechAuth.from_config(config),
            pool_size=int(_setting(config, "TTS_POOL_SIZE", 4)),
            acquire_timeout=float(_setting(config, "POOL_ACQUIRE_TIMEOUT", 2.0)),
            default_voice=configured_voice(config),
            token_provider=token_provider,
            max_size=session_limit(config),
        )

    @property
    def secrets(self) -> tuple[str, ...]:
        return self.auth.secrets

    def voice_for(self, voice: VoiceSpec | None) -> VoiceSpec:
        return resolve_voice(voice, self._default_voice)

    async def _new_synthesizer(self) -> _PooledSynthesizer:
        token = await self._tokens.token() if self._tokens is not None else None
        config = build_speech_config(self.auth, token, self.endpoint)
        return await asyncio.get_running_loop().run_in_executor(self._executor, _PooledSynthesizer, config)

    async def _close_synthesizer(self, synth: _PooledSynthesizer) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, synth.close)

    async def warm(self) -> int:
        """Create ``TTS_POOL_SIZE`` synthesizers (threads; no network until the first text)."""
        return await self.pool.warm()

    async def synthesize(self, text: str, voice: VoiceSpec) -> AsyncIterator[bytes]:
        """Yield 24 kHz PCM16 chunks (~100 ms) as the service streams them."""
        if not text or not text.strip():
            return
        ssml = build_ssml(text, self.voice_for(voice))
        try:
            synth = await self.pool.acquire()
        except PoolTimeout as exc:
            raise ProviderError(f"speech synthesis busy: {exc} (Azure synthesizers)") from None
        except RuntimeError as exc:
            raise ProviderError(f"speech synthesis unavailable: {exc}") from None
        except ProviderError:
            raise
        except Exception as exc:
            raise ProviderError(_redact(f"Azure speech synthesis unavailable: {exc}", self.secrets)) from None

        loop = asyncio.get_running_loop()
        # Holds one text's audio at most; the producer is the service synthesising this one text.
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        broken = False
        speaking: asyncio.Future[Any] | None = None
        try:
            if self._tokens is not None:
                token = await self._tokens.token()
                if token != synth.token:
                    synth.synth.authorization_token = token
                    synth.token = token
            synth.sink = lambda data: loop.call_soon_threadsafe(queue.put_nowait, data)
            speaking = loop.run_in_executor(self._executor, synth.speak, ssml)
            speaking.add_done_callback(lambda _: queue.put_nowait(None))
            chunker = FrameChunker(self.chunk_bytes)
            streamed = 0
            while (data := await queue.get()) is not None:
                streamed += len(data)
                for frame in chunker.push(data):
                    yield frame
            synth.sink = None
            result = speaking.result()
            if result.reason == speechsdk.ResultReason.Canceled:
                broken = True
                raise ProviderError(
                    _cancellation_message(
                        "Azure speech synthesis failed", result.cancellation_details, self.secrets
                    )
                )
            tail = bytes(result.audio_data or b"")[streamed:]  # anything the events did not deliver
            for frame in chunker.push(tail):
                yield frame
            rest = chunker.flush(pad_byte=None)
            if rest:
                yield rest[: len(rest) - len(rest) % 2]
        except ProviderError:
            raise
        except Exception as exc:
            broken = True
            raise ProviderError(_redact(f"Azure speech synthesis failed: {exc}", self.secrets)) from None
        finally:
            synth.sink = None
            if speaking is not None and not speaking.done():  # consumer stopped early (barge-in)
                try:
                    await loop.run_in_executor(self._executor, synth.stop)
                    await asyncio.wait_for(asyncio.shield(speaking), 5.0)
                except Exception:
                    broken = True
            await self.pool.release(synth, broken=broken)

    async def close(self) -> None:
        await self.pool.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._tokens is not None:
            await self._tokens.close()
