"""The recogniser's queue (in the child process of :mod:`voiceagent.speech.whisper_worker`): what a
waiting caller needs first is decoded first.

Why a queue of its own rather than a thread pool's FIFO: when a dozen callers stop speaking at
once, each one's final transcript (or the pause hypothesis that will become it) waits behind
every interim asked a moment earlier, and a decode cannot be interrupted. Here:

- a final (the turn is over, the caller waits) goes before a pause hypothesis (the end of the turn
  waits for it), which goes before an interim (text on a screen); within a kind, the oldest first;
- a final for an utterance makes its queued interims and pause hypotheses stale: they are skipped
  (answered as such, never decoded). So does a newer interim or pause for the older interims of the
  same utterance, and a newer pause for an older one (the caller spoke again in between);
- a queued pause hypothesis can be promoted to a final (the turn ended in that pause, with no new
  audio: its answer is the final transcript, no second decode);
- :meth:`DecodeQueue.take` hands a worker a batch: the first request and up to ``max_batch - 1``
  more of the same urgency (finals and pauses together, interims only with interims) and the same
  encoder window, decoded in one ``generate`` call.

Pure: no model, no I/O (tests drive it directly). Thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

__all__ = ["DecodeQueue", "Kind", "Request"]


class Kind(IntEnum):
    """What a decode is for; the lower, the sooner it is served."""

    FINAL = 0
    PAUSE = 1
    INTERIM = 2

    @property
    def urgent(self) -> bool:
        """A caller's turn waits for it (finals, pause hypotheses)."""
        return self is not Kind.INTERIM


@dataclass
class Request:
    """One decode asked for: ``utterance`` names the caller's utterance (stale-skipping), ``window``
    the encoder frames its audio needs (only equal windows batch together)."""

    id: int
    kind: Kind
    utterance: int
    window: int = 0
    payload: Any = None
    queued_at: float = field(default_factory=time.monotonic)
    over_agent: bool = False  # the caller spoke over the agent (see whisper_worker.decode_choice)


class DecodeQueue:
    """Requests by urgency then age; stale ones skipped; batches for the workers."""

    def __init__(self, on_skip: Callable[[Request], None] | None = None) -> None:
        self._items: list[Request] = []
        self._cond = threading.Condition()
        self._closed = False
        self._on_skip = on_skip
        self.deepest = 0  # the most requests queued at once

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def put(self, request: Request) -> list[Request]:
        """Queue ``request``; return the requests it made stale (removed, reported to ``on_skip``)."""
        with self._cond:
            stale = [r for r in self._items if _supersedes(request, r)]
            if stale:
                self._items = [r for r in self._items if not _supersedes(request, r)]
            self._items.append(request)
            self.deepest = max(self.deepest, len(self._items))
            self._cond.notify()
        for r in stale:
            if self._on_skip is not None:
                self._on_skip(r)
        return stale

    def promote(self, request_id: int) -> bool:
        """Serve a queued request as a final (its answer is now the caller's final transcript); its
        utterance's queued interims go stale. False when it is no longer queued (being decoded or
        done: its answer is on its way)."""
        with self._cond:
            found = next((r for r in self._items if r.id == request_id), None)
            if found is None:
                return False
            found.kind = Kind.FINAL
            stale = [r for r in self._items if r is not found and _supersedes(found, r)]
            self._items = [r for r in self._items if r is found or not _supersedes(found, r)]
        for r in stale:
            if self._on_skip is not None:
                self._on_skip(r)
        return True

    def depth(self, urgent_only: bool = False) -> int:
        with self._cond:
            return sum(1 for r in self._items if r.kind.urgent or not urgent_only)

    def take(self, max_batch: int = 1, timeout: float | None = None) -> list[Request]:
        """The next batch (waits for one; empty when closed or after ``timeout``)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._items or self._closed, timeout):
                return []
            if not self._items:
                return []
            ordered = sorted(self._items, key=lambda r: (r.kind, r.queued_at))
            first = ordered[0]
            batch = [first]
            for r in ordered[1:]:
                if len(batch) >= max_batch:
                    break
                if r.kind.urgent == first.kind.urgent and r.window == first.window:
                    batch.append(r)
            taken = {id(r) for r in batch}
            self._items = [r for r in self._items if id(r) not in taken]
            return batch

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def _supersedes(new: Request, old: Request) -> bool:
    """``old`` need not be decoded once ``new`` is queued: the same utterance, and ``new`` hears
    at least as much audio and is wanted at least as much (a final over interims and pauses, a
    pause over older pauses - the caller spoke again since, so the engine ignores that answer -
    and interims, an interim over older interims)."""
    if new.utterance != old.utterance or new.utterance == 0:
        return False
    if new.kind is Kind.FINAL:
        return old.kind is not Kind.FINAL
    return old.kind is Kind.INTERIM or (new.kind is Kind.PAUSE and old.kind is Kind.PAUSE)
