"""The server's end of the Whisper recogniser process (:mod:`voiceagent.speech.whisper_worker`):
the pipe, the decodes waiting for their answer line, and what the recogniser's queue did.

Requests carry what they are for (:class:`~voiceagent.speech.whisper_queue.Kind`) and which
utterance, so the child serves a waiting caller first and skips what a final made stale; the
answers say how long each waited and in how big a batch it was decoded, counted here for
``GET /pools`` (``stt.queue``) and the burst benchmark.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from collections import Counter, deque
from typing import Any, NamedTuple

from voiceagent.conversation.providers import ProviderError
from voiceagent.speech.whisper_queue import Kind
from voiceagent.speech.whisper_worker import BEAM, OVER_AGENT

__all__ = ["Decoded", "QueueStats", "RecognizerProcess", "Skipped"]


class Decoded(NamedTuple):
    """One decode: the text, the recogniser's CPU seconds, the audio's seconds, and Whisper's mean
    log-probability per token of those words (its confidence; 0.0 for an old worker's answer)."""

    text: str
    cpu_s: float
    audio_s: float
    logprob: float = 0.0


class Skipped(ProviderError):
    """The recogniser skipped a decode a newer one for the same utterance made stale."""


def _spread(values: deque[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 1),
        "p95": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))], 1),
        "max": round(ordered[-1], 1),
    }


class QueueStats:
    """What the recogniser's queue did since the process started serving: requests by kind
    (served, skipped as stale, promoted from a pause to a final), how long the served ones waited
    in the queue and how long their decode took (a slow answer is a deep queue or a slow machine:
    these tell which), batches, greedy and narrowed decodes, the deepest it got."""

    def __init__(self) -> None:
        self.served: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.promoted = 0
        self.batches = 0.0
        self.batched = 0  # requests decoded in a batch of two or more
        self.greedy = 0  # requests decoded with greedy search (speech over the agent in a burst)
        self.narrowed = 0  # requests decoded with a narrower search than the usual beam (a burst, interims)
        self.depth = 0  # decodes asked for and not answered now
        self.deepest = 0
        self._waits: dict[str, deque[float]] = {k.name.lower(): deque(maxlen=4096) for k in Kind}
        self._decodes: dict[str, deque[float]] = {k.name.lower(): deque(maxlen=4096) for k in Kind}

    def asked(self, pending: int) -> None:
        self.depth = pending
        self.deepest = max(self.deepest, pending)

    def answered(self, kind: Kind, wait_s: float, batch: int, beam: int, decode_s: float = 0.0) -> None:
        name = kind.name.lower()
        self.served[name] += 1
        self._waits[name].append(wait_s * 1000.0)
        self._decodes[name].append(decode_s * 1000.0)
        self.batches += 1.0 / max(1, batch)  # a batch of n answers n times
        self.batched += batch > 1
        self.greedy += beam == 1
        self.narrowed += beam < BEAM

    def snapshot(self) -> dict[str, Any]:
        waits = {name: _spread(values) for name, values in self._waits.items() if values}
        decodes = {name: _spread(values) for name, values in self._decodes.items() if values}
        return {
            "depth": self.depth,
            "deepest": self.deepest,
            "served": dict(self.served),
            "skipped_stale": dict(self.skipped),
            "promoted_pause_to_final": self.promoted,
            "wait_ms": waits,
            "decode_ms": decodes,  # the decode itself (its batch's), after the wait
            "batches": round(self.batches),
            "batched_requests": self.batched,
            "greedy_requests": self.greedy,
            "narrowed_requests": self.narrowed,
        }


class RecognizerProcess:
    """The child process and the decodes waiting for its answers."""

    def __init__(self, proc: asyncio.subprocess.Process, model: str, stats: QueueStats | None = None):
        self.proc = proc
        self.model = model
        self.pending: dict[int, asyncio.Future[Decoded]] = {}
        self.kinds: dict[int, Kind] = {}
        self.alive = True
        self.reader: asyncio.Task | None = None
        self.stats = stats or QueueStats()

    def send(
        self, request: int, kind: Kind, utterance: int, prompt: bytes, pcm16: bytes, over_agent: bool = False
    ) -> None:
        """Ask for a decode (``utterance`` 0: none to go stale with; ``over_agent``: speech over the
        agent, whose confidence must stay calibrated even in a burst)."""
        payload = (
            bytes([kind | (OVER_AGENT if over_agent else 0)])
            + utterance.to_bytes(4, "little")
            + len(prompt).to_bytes(4, "little")
        )
        payload += prompt + pcm16
        assert self.proc.stdin is not None
        self.proc.stdin.write(
            b"D" + request.to_bytes(4, "little") + len(payload).to_bytes(4, "little") + payload
        )
        self.kinds[request] = kind
        self.stats.asked(len(self.pending))

    def promote(self, request: int) -> None:
        """A queued pause decode is now the caller's final transcript: serve it as a final."""
        if request in self.kinds and self.proc.stdin is not None:
            self.proc.stdin.write(b"P" + request.to_bytes(4, "little") + bytes(4))
            self.kinds[request] = Kind.FINAL
            self.stats.promoted += 1

    def forget(self, request: int) -> None:
        self.pending.pop(request, None)
        self.kinds.pop(request, None)
        self.stats.depth = len(self.pending)

    async def read_loop(self) -> None:
        assert self.proc.stdout is not None
        try:
            while line := await self.proc.stdout.readline():
                self._answer(line.rstrip(b"\n").decode("utf-8", "replace"))
        finally:
            self.alive = False
            for future in self.pending.values():
                if not future.done():
                    future.set_exception(
                        ProviderError("offline speech recognition: the recogniser process exited")
                    )
            self.pending.clear()

    def _answer(self, line: str) -> None:
        kind, _, rest = line.partition(" ")
        request, _, rest = rest.partition(" ")
        if not request.isdigit():
            return
        number = int(request)
        future = self.pending.pop(number, None)
        asked = self.kinds.pop(number, Kind.FINAL)
        self.stats.depth = len(self.pending)
        if future is None or future.done():
            return
        if kind == "R":
            cpu, audio, logprob, wait, batch, beam, text = [*rest.split(" ", 6), *[""] * 7][:7]
            self.stats.answered(asked, float(wait or 0), int(batch or 1), int(beam or 0), float(cpu or 0))
            future.set_result(Decoded(text.strip(), float(cpu or 0), float(audio or 0), float(logprob or 0)))
        elif kind == "S":
            self.stats.skipped[asked.name.lower()] += 1
            future.set_exception(Skipped("a newer decode of this utterance made it stale"))
        else:
            future.set_exception(ProviderError(f"offline speech recognition failed: {rest}"))

    async def close(self) -> None:
        self.alive = False
        if self.proc.returncode is None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()  # the child exits on EOF
            try:
                await asyncio.wait_for(self.proc.wait(), 3.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.proc.wait(), 3.0)
        if self.reader is not None:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self.reader, 3.0)
