"""Azure AI Text to speech (:class:`AzureTTS`): SSML in (:func:`build_ssml`), 24 kHz PCM16 chunks
out while the service synthesises, on a pool of synthesizers (credentials, SpeechConfig and
failure messages: :mod:`.azure_auth`).

Threading (architecture rule 6): the SDK calls our ``synthesizing`` handler on its own threads and
the handler only hands the chunk to the event loop with ``loop.call_soon_threadsafe``. Creating a
synthesizer, ``speak`` and ``stop`` block, so they run on a thread pool owned by the provider.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final
from xml.sax.saxutils import escape, quoteattr

import azure.cognitiveservices.speech as speechsdk

from voiceagent.conversation.providers import ProviderError
from voiceagent.conversation.specs import VoiceSpec, configured_voice, resolve_voice
from voiceagent.speech.audio import FrameChunker, frame_bytes_for
from voiceagent.speech.azure_auth import (
    AadTokenProvider,
    AzureSpeechAuth,
    AzureSpeechClient,
    cancellation_message,
    redact,
    setting,
)
from voiceagent.speech.pools import ClientPool, PoolTimeout, session_limit

__all__ = ["DEFAULT_VOICE", "TTS_SAMPLE_RATE", "AzureTTS", "build_ssml"]

logger = logging.getLogger("voiceagent.speech.azure")

DEFAULT_VOICE: Final = "en-US-AvaMultilingualNeural"
TTS_SAMPLE_RATE: Final = 24000  # Raw24Khz16BitMonoPcm
_RATE = re.compile(r"^[+-]?\d{1,3}(\.\d+)?%$|^(x-slow|slow|medium|fast|x-fast|default)$")
_STYLE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_LOCALE = re.compile(r"^([a-z]{2,3}-[A-Za-z0-9]{2,4})(?:-|$)")
# Characters XML 1.0 does not allow at all (not even escaped): the service would reject the SSML.
_XML_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


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


class AzureTTS(AzureSpeechClient):
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
        super().__init__(auth, endpoint, token_provider)
        self.chunk_bytes = frame_bytes_for(TTS_SAMPLE_RATE, chunk_ms)
        self._default_voice = default_voice or VoiceSpec()
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
            pool_size=int(setting(config, "TTS_POOL_SIZE", 4)),
            acquire_timeout=float(setting(config, "POOL_ACQUIRE_TIMEOUT", 2.0)),
            default_voice=configured_voice(config),
            token_provider=token_provider,
            max_size=session_limit(config),
        )

    def voice_for(self, voice: VoiceSpec | None) -> VoiceSpec:
        return resolve_voice(voice, self._default_voice)

    async def _new_synthesizer(self) -> _PooledSynthesizer:
        config = await self.speech_config()
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
            raise ProviderError(redact(f"Azure speech synthesis unavailable: {exc}", self.secrets)) from None

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
                    cancellation_message(
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
            raise ProviderError(redact(f"Azure speech synthesis failed: {exc}", self.secrets)) from None
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
        await self._close_tokens()
