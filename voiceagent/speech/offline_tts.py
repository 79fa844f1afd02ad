"""Offline speech synthesis: the espeak-ng command-line synthesiser.

Honest about what it is: a formant synthesiser, robotic but intelligible, fast (hundreds of times
real time), in ~100 languages, with no network and no credentials.

Each text runs one ``espeak-ng --stdout --stdin`` process started with
``asyncio.create_subprocess_exec`` (no shell). The text goes in on stdin, never on the command
line, so nothing in it can be read as an option (``-w /etc/passwd`` is just spoken), it never shows
up in ``ps``, and no ``-m`` flag is passed, so SSML-like markup is not interpreted. Control
characters are removed first (espeak-ng has in-band escape sequences).

The WAV stream on stdout (22.05 kHz for espeak's own voices) is parsed incrementally, resampled to
:attr:`EspeakTTS.sample_rate` with a streaming resampler and yielded in ~100 ms chunks as espeak
writes it. Each running process holds a slot of a :class:`~voiceagent.speech.pools.ClientPool`:
``TTS_POOL_SIZE`` slots are kept, more are added on demand up to the pool's maximum (the
process's session limit), which bounds the concurrent espeak-ng processes. The processes are
driven with asyncio pipes: no thread, nothing blocks the event loop. Only at that maximum does
the acquire timeout turn overload into a clear ``ProviderError``.

Two guards keep a burst of syntheses (200 calls answered at once, each greeted) from stalling the
event loop: lines are shared and replayed through a :class:`SynthesisCache` (the same greeting is
synthesised once, not 200 times), and processes are started one at a time (``_spawn``): starting
one forks the server on the loop's thread (2-10 ms), and 200 forked in one loop step had held the
loop for two seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import shutil
import struct
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final

import numpy as np
import soxr

from voiceagent.conversation.providers import ProviderError
from voiceagent.conversation.specs import VoiceSpec, configured_voice, resolve_voice
from voiceagent.speech.audio import DEFAULT_QUALITY, FrameChunker, StreamResampler, frame_bytes_for
from voiceagent.speech.pools import ClientPool, PoolTimeout, pool_options
from voiceagent.speech.synthesis_cache import SynthesisCache

__all__ = [
    "DEFAULT_WPM",
    "EspeakTTS",
    "WavStreamParser",
    "espeak_rate",
    "espeak_voice",
    "sanitize_text",
]

logger = logging.getLogger("voiceagent.speech.offline_tts")

DEFAULT_WPM: Final = 175  # espeak-ng's own default speed
MIN_WPM, MAX_WPM = 80, 450
DEFAULT_ESPEAK_VOICE: Final = "en-us"
CHUNK_MS: Final = 100
READ_TIMEOUT_S: Final = 15.0  # espeak writes within milliseconds; silence this long means it hung
MAX_TEXT_CHARS: Final = 20_000
_NAMED_RATES: Final = {
    "x-slow": 0.5,
    "slow": 0.75,
    "medium": 1.0,
    "default": 1.0,
    "fast": 1.25,
    "x-fast": 1.5,
}
_PERCENT = re.compile(r"^([+-]?\d{1,3}(?:\.\d+)?)%$")
_LOCALE = re.compile(r"^([a-z]{2,3})(?:-([A-Za-z0-9]{2,4}))?(?:-|$)")
# C0 controls except tab/newline/CR, DEL, C1 controls: espeak-ng treats some as command escapes.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def sanitize_text(text: str) -> str:
    """Text safe to hand espeak-ng on stdin: control characters become spaces, whitespace trimmed."""
    return _CONTROL.sub(" ", text or "").strip()[:MAX_TEXT_CHARS]


def espeak_voice(name: str | None, languages: frozenset[str] | None = None) -> str:
    """Map an Azure-style voice name (``en-US-AvaNeural``) or locale to an espeak-ng voice (``en-us``).

    espeak-ng resolves ``lang-region`` itself (``es-mx`` -> Spanish). ``languages`` is the set of
    espeak language codes (from ``espeak-ng --voices``); when given, a name whose language espeak
    does not know falls back to US English instead of failing.
    """
    m = _LOCALE.match((name or "").strip())
    if not m:
        return DEFAULT_ESPEAK_VOICE
    lang = m.group(1).lower()
    voice = f"{lang}-{m.group(2).lower()}" if m.group(2) else lang
    if languages is not None and lang not in {code.split("-")[0] for code in languages}:
        logger.warning("espeak-ng has no voice for %r: using %s", name, DEFAULT_ESPEAK_VOICE)
        return DEFAULT_ESPEAK_VOICE
    return voice


def espeak_rate(rate: str | None, base_wpm: int = DEFAULT_WPM) -> int:
    """Map an SSML-style rate (``+3%``, ``-10%``, ``fast``) to espeak-ng words per minute."""
    value = (rate or "").strip().lower()
    factor = 1.0
    if value in _NAMED_RATES:
        factor = _NAMED_RATES[value]
    elif m := _PERCENT.match(value):
        factor = 1.0 + float(m.group(1)) / 100.0
    return max(MIN_WPM, min(MAX_WPM, round(base_wpm * factor)))


class WavStreamParser:
    """Incremental RIFF/WAVE parser for a stream whose data size is unknown (espeak's ``--stdout``).

    :meth:`feed` returns the PCM bytes that follow the header (always an even count; an odd
    trailing byte is kept for the next call). ``sample_rate`` is set once the ``fmt`` chunk has
    been read. Only 16-bit mono PCM is accepted: that is what espeak-ng writes.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._in_data = False
        self.sample_rate: int | None = None

    def feed(self, data: bytes) -> bytes:
        self._buf += data
        if not self._in_data:
            self._parse_header()
            if not self._in_data:
                return b""
        n = len(self._buf) - len(self._buf) % 2
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def _parse_header(self) -> None:
        buf = self._buf
        if len(buf) < 12:
            return
        if buf[:4] != b"RIFF" or buf[8:12] != b"WAVE":
            raise ProviderError("espeak-ng did not produce a WAV stream")
        pos = 12
        while len(buf) >= pos + 8:
            chunk_id = bytes(buf[pos : pos + 4])
            (size,) = struct.unpack_from("<I", buf, pos + 4)
            if chunk_id == b"data":
                if self.sample_rate is None:
                    raise ProviderError("espeak-ng WAV stream has no fmt chunk before its data")
                del buf[: pos + 8]
                self._in_data = True
                return
            if len(buf) < pos + 8 + size:
                return  # wait for the rest of this chunk
            if chunk_id == b"fmt ":
                fmt, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", buf, pos + 8)
                if fmt != 1 or channels != 1 or bits != 16:
                    raise ProviderError(
                        f"espeak-ng wrote unsupported WAV audio (format {fmt}, {channels} ch, {bits} bit)"
                    )
                self.sample_rate = rate
            pos += 8 + size + (size & 1)


class _SoxrResampler:
    """Streaming resampler for input rates :class:`StreamResampler` does not accept (22050 Hz).

    Same interface as the subset of StreamResampler used here (``process``, ``flush``).
    """

    def __init__(self, in_rate: int, out_rate: int):
        self._stream = soxr.ResampleStream(in_rate, out_rate, 1, dtype="int16", quality=DEFAULT_QUALITY)

    def process(self, pcm: bytes) -> np.ndarray:
        return self._stream.resample_chunk(np.frombuffer(pcm, dtype="<i2").astype(np.int16, copy=False))

    def flush(self) -> np.ndarray:
        return self._stream.resample_chunk(np.empty(0, dtype=np.int16), last=True)


def _resampler(in_rate: int, out_rate: int) -> StreamResampler | _SoxrResampler:
    try:
        return StreamResampler(in_rate, out_rate)
    except ValueError:  # espeak's 22050 Hz is not one of audio.SUPPORTED_RATES
        return _SoxrResampler(in_rate, out_rate)


class _Slot:
    """A permit to run one espeak-ng process (the pool's "client")."""

    __slots__ = ("n",)

    def __init__(self, n: int):
        self.n = n


class EspeakTTS:
    """TTSProvider running espeak-ng per text, streaming PCM16 at ``sample_rate`` (16 or 24 kHz)."""

    name = "offline-espeak-ng"

    def __init__(
        self,
        sample_rate: int = 24000,
        pool_size: int = 4,
        acquire_timeout: float = 2.0,
        default_voice: VoiceSpec | Callable[[], VoiceSpec] | None = None,
        binary: str = "espeak-ng",
        chunk_ms: int = CHUNK_MS,
        max_size: int | None = None,
    ):
        if sample_rate not in (16000, 24000):
            raise ValueError(f"EspeakTTS sample_rate must be 16000 or 24000, got {sample_rate!r}")
        self.sample_rate = sample_rate
        self.binary = binary
        self.chunk_bytes = frame_bytes_for(sample_rate, chunk_ms)
        self._default_voice = default_voice or VoiceSpec()
        self._languages: frozenset[str] | None = None
        self._slots = 0
        self.lines = SynthesisCache()
        self._spawning: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self.pool: ClientPool[_Slot] = ClientPool(
            "tts",
            self._new_slot,
            size=pool_size,
            provider=self.name,
            acquire_timeout=acquire_timeout,
            max_size=max_size,
        )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> EspeakTTS:
        return cls(
            default_voice=configured_voice(config),
            **pool_options(config, "tts"),
        )

    def _new_slot(self) -> _Slot:
        self._slots += 1
        return _Slot(self._slots)

    def _resolve(self, voice: VoiceSpec | None) -> VoiceSpec:
        return resolve_voice(voice, self._default_voice)

    def command(self, voice: VoiceSpec | None) -> list[str]:
        """The argv for one synthesis (text goes on stdin); style has no espeak equivalent."""
        spec = self._resolve(voice)
        return [
            self.binary,
            "--stdout",
            "--stdin",
            "-b",
            "1",  # input is UTF-8
            "-v",
            espeak_voice(spec.name, self._languages),
            "-s",
            str(espeak_rate(spec.rate)),
        ]

    def _missing_binary(self) -> ProviderError:
        return ProviderError(
            f"offline speech synthesis unavailable: {self.binary!r} not found; install espeak-ng "
            "(apt-get install espeak-ng) or configure Azure Speech (CLOUD_SPEECH_REGION + CLOUD_SPEECH_KEY)"
        )

    def _spawn_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._spawning.get(loop)
        if lock is None:
            self._spawning = {k: v for k, v in self._spawning.items() if not k.is_closed()}
            lock = self._spawning[loop] = asyncio.Lock()
        return lock

    async def _spawn(self, argv: list[str]) -> asyncio.subprocess.Process:
        """Start espeak-ng; one start at a time, so the loop forks at most once per step."""
        try:
            async with self._spawn_lock():
                return await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                )
        except FileNotFoundError:
            raise self._missing_binary() from None
        except OSError as exc:
            raise ProviderError(f"offline speech synthesis could not start {self.binary!r}: {exc}") from None

    async def synthesize(self, text: str, voice: VoiceSpec) -> AsyncIterator[bytes]:
        """Yield PCM16 mono chunks of ~100 ms at ``sample_rate`` while espeak-ng produces them
        (a line synthesised recently, or being synthesised for another caller, is shared)."""
        clean = sanitize_text(text)
        if not clean:
            return
        argv = self.command(voice)
        shared = self.lines.stream((*argv, clean), clean, lambda: self._synthesize(clean, argv))
        async with contextlib.aclosing(shared) as chunks:  # a barge-in stops the process at once
            async for chunk in chunks:
                yield chunk

    async def _synthesize(self, clean: str, argv: list[str]) -> AsyncIterator[bytes]:
        try:
            slot = await self.pool.acquire()
        except PoolTimeout as exc:
            raise ProviderError(f"speech synthesis busy: {exc} (espeak-ng processes)") from None
        except RuntimeError as exc:  # pool closed
            raise ProviderError(f"speech synthesis unavailable: {exc}") from None
        proc: asyncio.subprocess.Process | None = None
        reaped = False
        try:
            proc = await self._spawn(argv)
            assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(clean.encode("utf-8"))
                await proc.stdin.drain()
            proc.stdin.close()  # --stdin: espeak reads to EOF, then speaks

            parser = WavStreamParser()
            resampler: StreamResampler | _SoxrResampler | None = None
            chunker = FrameChunker(self.chunk_bytes)
            produced = 0
            while True:
                try:
                    data = await asyncio.wait_for(proc.stdout.read(65536), READ_TIMEOUT_S)
                except TimeoutError:
                    raise ProviderError(f"espeak-ng produced no audio for {READ_TIMEOUT_S:g} s") from None
                if not data:
                    break
                pcm = parser.feed(data)
                if not pcm:
                    continue
                if resampler is None:
                    assert parser.sample_rate is not None
                    resampler = _resampler(parser.sample_rate, self.sample_rate)
                frames = chunker.push(resampler.process(pcm))
                for frame in frames:
                    produced += len(frame)
                    yield frame
            if resampler is not None:
                for frame in chunker.push(resampler.flush()):
                    produced += len(frame)
                    yield frame
            tail = chunker.flush(pad_byte=None)
            if tail:
                produced += len(tail)
                yield tail
            _, stderr = await asyncio.wait_for(proc.communicate(), READ_TIMEOUT_S)
            reaped = True
            if proc.returncode != 0:
                err = stderr.decode("utf-8", "replace").strip().splitlines()
                detail = err[-1] if err else f"exit status {proc.returncode}"
                raise ProviderError(f"espeak-ng failed (voice {argv[argv.index('-v') + 1]}): {detail}")
        finally:
            if proc is not None and not reaped:  # consumer stopped early (barge-in), or an error
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                # communicate() drains the pipes: on 3.11 wait() alone never returns while the
                # (paused) stdout pipe still holds audio nobody will read.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proc.communicate(), 5.0)
            await self.pool.release(slot)

    async def _load_languages(self) -> None:
        proc = await self._spawn([self.binary, "--voices"])
        out, _ = await proc.communicate()
        codes = {line.split()[1] for line in out.decode("utf-8", "replace").splitlines()[1:] if line.split()}
        if codes:
            self._languages = frozenset(codes)

    async def warm(self) -> int:
        """Check the binary, learn its languages, run one tiny synthesis; return the slot count."""
        if shutil.which(self.binary) is None:
            raise self._missing_binary()
        await self._load_languages()
        ready = await self.pool.warm()
        audio = 0
        async for chunk in self.synthesize("ready", VoiceSpec()):
            audio += len(chunk)
        if not audio:
            raise ProviderError("espeak-ng produced no audio for a test phrase")
        return ready

    async def close(self) -> None:
        await self.pool.close()
