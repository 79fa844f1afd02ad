"""Which work gives way when the two cores are short: the caller's words come first.

A burst of callers who stop speaking together each wait for the recogniser (its own process,
nice 0). Work that can wait a moment under contention runs its threads :data:`NICENESS` nicer
(Linux sets a thread's nice value by its thread id; elsewhere, or when not allowed, nothing
changes): Piper's syntheses (~20x faster than real time, they catch up with the answers of those
already heard). A quiet machine is unaffected: niceness only orders threads that compete for a
core. The end-of-turn model is not niced: a sure turn's end waits for its answer, so it gives way
only while the recogniser is backlogged (:mod:`voiceagent.speech.turn_model`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Final

__all__ = ["NICENESS", "behind_recognition"]

NICENESS: Final = 5  # added to a thread's nice value: ~1/3 of a recogniser thread's share of a core


def behind_recognition() -> None:
    """Lower the calling thread's priority by :data:`NICENESS` (call it as the thread starts)."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux, or not allowed: as it was
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, os.getpriority(os.PRIO_PROCESS, thread) + NICENESS)
