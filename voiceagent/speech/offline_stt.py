"""Offline speech recognition: pocketsphinx with its bundled US-English model.

Honest about what it is: a small HMM recogniser from the 2010s, fine for digits, yes/no and short
phrases, far below a cloud recogniser on free speech. It needs no network and no credentials.

Why each decoder lives in its own process (architecture rule 6): the pocketsphinx Python binding
holds the GIL for the whole of ``process_raw`` and ``end_utt``. Decoding on threads therefore
serialises every decoder in the process on one core AND starves the event loop: measured here,
8 concurrent streams on worker threads left the loop waiting ~60 ms (median) to ~200 ms (max)
for the GIL after every sleep. So each pooled "client" is a small child process
(``python -c ... _worker_main``, ~90 MB, the same as an in-process decoder plus ~12 MB of
interpreter) that owns one ``Decoder``. The loop only writes audio into the child's stdin pipe
and reads result lines from its stdout with asyncio: nothing blocks, decoders run in parallel on
all cores, and a crashing decoder takes only its own utterance down.

Wire format between parent and child (private to this module):
  parent -> child  op(1 byte) + length(uint32 LE) + payload: ``A`` audio, ``F`` finish, ``C`` cancel
  child -> parent  one line each: ``READY``, ``I <interim>``, ``R <cpu_s> <audio_s> <text>``,
                   ``E <message>``, ``K`` (cancel acknowledged)

Bounded buffering: audio not yet read by the child waits in the pipe transport's buffer; above
:data:`MAX_BUFFER_S` seconds of backlog (the child cannot keep up: machine overloaded), ``push``
drops the NEWEST audio and the drop is logged when the utterance ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from voiceagent.conversation.providers import ProviderError
from voiceagent.speech.pools import ClientPool, PoolTimeout, pool_options

__all__ = ["MAX_BUFFER_S", "PocketsphinxSTT", "PocketsphinxStream"]

logger = logging.getLogger("voiceagent.speech.offline_stt")

SAMPLE_RATE: Final = 16000
BYTES_PER_S: Final = SAMPLE_RATE * 2
MAX_BUFFER_S: Final = 10.0  # undecoded audio allowed in a child's pipe before push() drops audio
START_TIMEOUT_S: Final = 60.0  # loading the model takes ~0.3 s alone, seconds on a loaded machine
SUPPORTED_LANGUAGES: Final = frozenset({"en", "en-us"})
_PROJECT_ROOT: Final = str(Path(__file__).resolve().parents[2])
_BOOT: Final = (
    f"import sys; sys.path.insert(0, {_PROJECT_ROOT!r}); "
    "from voiceagent.speech.offline_stt import _worker_main; _worker_main()"
)


# --------------------------------------------------------------------------------------------------
# Child process
# --------------------------------------------------------------------------------------------------


CMN_INIT = "47.41,-1.32,-5.30,15.96,-12.81,-1.20,-1.64,-12.97,1.65,-8.99,7.78,-7.39,-4.03"


def _worker_main() -> None:
    """Run one decoder: read framed requests on stdin, write result lines on stdout."""
    import time

    from pocketsphinx import Config, Decoder

    interval = float(sys.argv[1]) if len(sys.argv) > 1 else 0.3
    inp, out = sys.stdin.buffer, sys.stdout.buffer

    def send(line: str) -> None:
        out.write(line.replace("\n", " ").encode("utf-8", "replace") + b"\n")
        out.flush()

    try:
        # fwdflat off: its second pass made end_utt cost ~100 ms per 3 s utterance for no
        # measurable accuracy gain on short turns; decoding is ~25% faster without it.
        # cmninit: the model's default cepstral mean (40,3,-1,0...) is far from real 16 kHz speech,
        # so a fresh decoder garbles its first utterances until live CMN catches up ("i lost my
        # card" -> "we are on these"). This starting point was measured after six espeak-ng
        # utterances at 16 kHz; live CMN keeps adapting to the actual microphone or line.
        decoder = Decoder(Config(loglevel="FATAL", fwdflat=False, cmninit=CMN_INIT))
        send("READY")
        in_utt, posted, last, cpu, audio = False, "", 0.0, 0.0, 0.0
        while True:
            header = inp.read(5)
            if len(header) < 5:
                return  # parent closed the pipe (or died): exit quietly
            op, size = header[:1], int.from_bytes(header[1:], "little")
            payload = inp.read(size) if size else b""
            try:
                if op == b"A":
                    if not in_utt:
                        decoder.start_utt()
                        in_utt, posted, last, cpu, audio = True, "", time.monotonic(), 0.0, 0.0
                    began = time.perf_counter()
                    decoder.process_raw(payload, False, False)
                    cpu += time.perf_counter() - began
                    audio += len(payload) / BYTES_PER_S
                    now = time.monotonic()
                    if now - last >= interval:
                        last = now
                        hyp = decoder.hyp()
                        text = hyp.hypstr.strip() if hyp is not None else ""
                        if text and text != posted:
                            posted = text
                            send(f"I {text}")
                elif op == b"F":
                    text = ""
                    if in_utt:
                        in_utt = False
                        began = time.perf_counter()
                        decoder.end_utt()
                        cpu += time.perf_counter() - began
                        hyp = decoder.hyp()
                        text = hyp.hypstr.strip() if hyp is not None else ""
                    send(f"R {cpu:.4f} {audio:.4f} {text}")
                elif op == b"C":
                    if in_utt:
                        in_utt = False
                        decoder.end_utt()
                    send("K")
            except Exception as exc:
                if in_utt:
                    in_utt = False
                    with contextlib.suppress(Exception):
                        decoder.end_utt()
                send(f"E {type(exc).__name__}: {exc}")
    except (KeyboardInterrupt, BrokenPipeError):
        return


# --------------------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------------------


class _DecoderProcess:
    """One child process with one decoder (the ``stt`` pool's client)."""

    def __init__(self, proc: asyncio.subprocess.Process):
        self.proc = proc
        self.current: PocketsphinxStream | None = None
        self.pending_acks = 0  # cancels sent whose "K" has not come back: discard lines until then
        self.alive = True
        self._reader: asyncio.Task | None = None

    @classmethod
    async def start(cls, interim_interval: float) -> _DecoderProcess:
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                _BOOT,
                str(interim_interval),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            raise ProviderError(f"offline speech recognition could not start its decoder: {exc}") from None
        worker = cls(proc)
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT_S)
        except TimeoutError:
            line = b""
        if line.strip() != b"READY":
            await worker.close()
            raise ProviderError("offline speech recognition: the pocketsphinx decoder failed to load")
        worker._reader = asyncio.create_task(worker._read_loop(), name="pocketsphinx-reader")
        return worker

    def send(self, op: bytes, payload: bytes = b"") -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(op + len(payload).to_bytes(4, "little") + payload)

    def backlog(self) -> int:
        """Bytes written to the child that it has not read yet."""
        assert self.proc.stdin is not None
        return self.proc.stdin.transport.get_write_buffer_size()

    async def _read_loop(self) -> None:
        assert self.proc.stdout is not None
        try:
            while line := await self.proc.stdout.readline():
                kind, _, rest = line.rstrip(b"\n").decode("utf-8", "replace").partition(" ")
                if kind == "K":
                    self.pending_acks = max(0, self.pending_acks - 1)
                    continue
                stream = self.current
                if self.pending_acks or stream is None:
                    continue  # belongs to a cancelled utterance
                if kind == "I":
                    stream._deliver_interim(rest)
                elif kind == "R":
                    cpu, audio, text = [*rest.split(" ", 2), "", ""][:3]
                    stream._resolve(text.strip(), float(cpu or 0), float(audio or 0))
                elif kind == "E":
                    stream._fail(f"offline speech recognition failed: {rest}")
        finally:
            self.alive = False
            if self.current is not None:
                self.current._fail("offline speech recognition: the decoder process exited")

    async def close(self) -> None:
        self.alive = False
        proc = self.proc
        if proc.returncode is None:
            if proc.stdin is not None:
                proc.stdin.close()  # the child exits on EOF
            try:
                await asyncio.wait_for(proc.wait(), 2.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proc.wait(), 2.0)
        if self._reader is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._reader, 2.0)


class PocketsphinxStream:
    """One utterance on a leased decoder process (implements ``STTStream``). Made by ``open()``."""

    def __init__(self, provider: PocketsphinxSTT, worker: _DecoderProcess, on_interim: Callable[[str], None]):
        self._provider = provider
        self._worker = worker
        self._on_interim = on_interim
        self._done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._closing = False
        self._released = False
        self._settled = False
        self.dropped_bytes = 0
        self.decoded_seconds = 0.0  # audio the decoder consumed (set when the utterance ends)
        self.decode_cpu_seconds = 0.0  # time the decoder spent on it
        worker.current = self

    # --- called by the worker's reader task (event loop) -------------------------------------
    def _deliver_interim(self, text: str) -> None:
        if self._closing or self._done.done() or not text:
            return
        try:
            self._on_interim(text)
        except Exception:
            logger.exception("on_interim callback failed")

    def _resolve(self, text: str, cpu: float, audio: float) -> None:
        self._settled = True  # the child ended the utterance itself
        self.decode_cpu_seconds, self.decoded_seconds = cpu, audio
        if not self._done.done():
            self._done.set_result(text)

    def _fail(self, message: str) -> None:
        if not self._done.done():
            self._done.set_exception(ProviderError(message))
            self._done.exception()  # retrieved: a cancel() caller never looks at it

    # --- STTStream -----------------------------------------------------------------------------
    async def push(self, pcm16: bytes) -> None:
        """Hand 16 kHz PCM16 audio to the decoder process; returns at once (a pipe write)."""
        if len(pcm16) % 2:
            raise ValueError(f"PCM16 audio must have an even number of bytes, got {len(pcm16)}")
        if self._done.done():
            if self._done.exception() is not None:
                raise self._done.exception()  # type: ignore[misc]
            return
        if self._closing or not pcm16:
            return
        if self._worker.backlog() > MAX_BUFFER_S * BYTES_PER_S:
            self.dropped_bytes += len(pcm16)
            return
        self._worker.send(b"A", bytes(pcm16))

    async def finish(self) -> str:
        """End the utterance; return the final hypothesis, lowercase as pocketsphinx gives it."""
        if self._closing:
            raise ProviderError("speech recognition stream already finished or cancelled")
        self._closing = True
        broken = False
        try:
            if not self._done.done():
                self._worker.send(b"F")
            # Generous: the backlog (<= MAX_BUFFER_S of audio) decodes at ~10x real time per core;
            # a pool grown past the core count shares the cores between that many more decoders.
            share = max(1.0, self._provider.pool.in_use / (os.cpu_count() or 1))
            timeout = (10.0 + self._worker.backlog() / BYTES_PER_S) * share
            return await asyncio.wait_for(asyncio.shield(self._done), timeout)
        except TimeoutError:
            broken = True
            raise ProviderError("offline speech recognition timed out finishing the utterance") from None
        except ProviderError:
            broken = not self._worker.alive
            raise
        finally:
            if self.dropped_bytes:
                logger.warning(
                    "pocketsphinx fell behind: dropped %.1f s of audio", self.dropped_bytes / BYTES_PER_S
                )
            await self._release(broken)

    async def cancel(self) -> None:
        """Drop the utterance; the decoder goes straight back to the pool (see ``_release``)."""
        if self._closing:
            return
        self._closing = True
        self._fail("cancelled")
        await self._release(False)

    async def _release(self, broken: bool) -> None:
        """Give the decoder back. Unless the child answered this utterance with its final result,
        tell it to drop the utterance (``C``) and discard whatever it still says about it until
        it acknowledges, so the next lease starts clean."""
        if self._released:
            return
        self._released = True
        worker = self._worker
        if worker.current is self:
            worker.current = None
        if worker.alive and not broken and not self._settled:
            worker.pending_acks += 1
            worker.send(b"C")
        await self._provider.pool.release(worker, broken=broken or not worker.alive)


class PocketsphinxSTT:
    """STTProvider on pooled pocketsphinx decoder processes (bundled en-US model only)."""

    name = "offline-pocketsphinx"
    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        pool_size: int = 4,
        acquire_timeout: float = 2.0,
        interim_interval: float = 0.3,
        max_size: int | None = None,
    ):
        """``pool_size`` decoder processes stay warm; more start on demand, up to ``max_size``
        (default: the default session limit). The pool bounds the child processes: decoding never
        runs in this process, so growth adds no thread and never blocks the event loop."""
        self.interim_interval = interim_interval
        self._workers: set[_DecoderProcess] = set()  # every live child, leased or idle
        self.pool: ClientPool[_DecoderProcess] = ClientPool(
            "stt",
            self._start_worker,
            size=pool_size,
            provider=self.name,
            acquire_timeout=acquire_timeout,
            closer=self._close_worker,
            max_size=max_size,
        )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> PocketsphinxSTT:
        return cls(
            **pool_options(config, "stt"),
        )

    async def _start_worker(self) -> _DecoderProcess:
        worker = await _DecoderProcess.start(self.interim_interval)
        self._workers.add(worker)
        return worker

    async def _close_worker(self, worker: _DecoderProcess) -> None:
        self._workers.discard(worker)
        await worker.close()

    async def warm(self) -> int:
        """Start ``STT_POOL_SIZE`` decoder processes concurrently; return how many are ready."""
        return await self.pool.warm()

    async def open(self, language: str, on_interim: Callable[[str], None]) -> PocketsphinxStream:
        if (language or "").strip().lower() not in SUPPORTED_LANGUAGES:
            raise ProviderError(
                f"offline speech recognition (pocketsphinx) only has the en-US model; language "
                f"{language!r} needs a cloud recogniser (set CLOUD_SPEECH_REGION and CLOUD_SPEECH_KEY)"
            )
        for _ in range(max(1, self.pool.size) + 1):
            try:
                worker = await self.pool.acquire()
            except PoolTimeout as exc:
                raise ProviderError(f"speech recognition busy: {exc} (offline recognisers)") from None
            except ProviderError:
                raise
            except RuntimeError as exc:  # pool closed
                raise ProviderError(f"speech recognition unavailable: {exc}") from None
            if worker.alive:
                return PocketsphinxStream(self, worker, on_interim)
            await self.pool.release(worker, broken=True)  # died while idle: replace it
        raise ProviderError("offline speech recognition: decoder processes keep exiting")

    async def close(self) -> None:
        """Stop every decoder process, including those of streams never finished or cancelled."""
        await self.pool.close()
        leased, self._workers = list(self._workers), set()
        await asyncio.gather(*(worker.close() for worker in leased), return_exceptions=True)


if __name__ == "__main__":  # pragma: no cover - the child process entry point, for manual runs
    _worker_main()
