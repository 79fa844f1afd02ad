"""The server's end of the recording writer process (:mod:`.writer_worker`): items as frames on
its pipe, written from the event loop without waiting.

Why no thread here: a thread that resamples and stores shares the interpreter with the event loop.
This side only packs each item (:mod:`.writer_wire`) and writes the items to a non-blocking pipe
every :data:`FLUSH_S` (one write of many items: each write wakes the child, and a child woken 400
times a second at 200 conversations took the cores from the event loop that many times); what
the pipe cannot take now waits in a bounded list (``RECORDING_QUEUE_MAX`` items, the same bound as
the thread's queue: over it an item is dropped and the recorder counts it) and goes out when the
loop says the pipe is writable. A close is never dropped. The child says ``C`` per stored chunk
(``voiceagent_recording_chunks_written_total``). A child that died is started again by the next
item (the recordings it had open end there; their chunks so far are stored).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import subprocess
import sys
import time
from collections import deque
from typing import Any

from django.conf import settings

from voiceagent.observability import metrics
from voiceagent.recording.writer_wire import encode

logger = logging.getLogger("voiceagent.recording")

__all__ = ["ProcessWriter"]

FLUSH_S = 0.1  # items gathered on this side before they go down the pipe together
PIPE_BYTES = 1 << 20  # the pipe's buffer (Linux; 64 KiB by default): a flush at 200 calls is ~1 MB


class ProcessWriter:
    """This process's recording writer process and the frames on their way to it."""

    def __init__(self, queue_max: int | None = None) -> None:
        self.max_items = int(queue_max or settings.CONFIG.RECORDING_QUEUE_MAX)
        self.late: deque = deque()  # the Recorder's interface: a close is never dropped here anyway
        self._pending: deque[memoryview] = deque()  # frames the pipe has not taken yet
        self._proc: subprocess.Popen | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watching = False  # the loop tells us when the pipe is writable again
        self._flush_due: asyncio.TimerHandle | None = None  # the next write of what was gathered
        self._failed_once = False

    # --- the loop's side --------------------------------------------------------------------------
    def submit(self, item: tuple[str, str, Any, float, float]) -> bool:
        """Send ``item`` without waiting; False when too many are waiting (the recorder counts it)."""
        if (self._proc is None or self._proc.poll() is not None) and not self._start():
            return False
        if item[1] != "close" and len(self._pending) >= self.max_items:
            return False
        self._pending.append(memoryview(encode(item)))
        if self._loop is None:  # not on a loop (a script): written as it comes
            self._write()
        elif item[1] == "close":  # a conversation ended: its recording is asked for next, now
            self._flush()
        elif not self._watching and self._flush_due is None:
            self._flush_due = self._loop.call_later(FLUSH_S, self._flush)
        metrics.RECORDING_QUEUE_DEPTH.set(len(self._pending))
        return True

    def _start(self) -> bool:
        if self._proc is not None:
            self._stop_watching()
            self._cancel_flush()
            logger.error("recording writer process exited (%s); starting another", self._proc.returncode)
        self._pending.clear()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "voiceagent.recording.writer_worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                close_fds=True,
            )
        except OSError as exc:
            if not self._failed_once:
                self._failed_once = True
                logger.error("recording writer process cannot start: %s (said once)", exc)
            self._proc = None
            return False
        assert self._proc.stdin is not None and self._proc.stdout is not None
        with contextlib.suppress(AttributeError, OSError):  # not Linux: the default pipe
            fcntl.fcntl(self._proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        os.set_blocking(self._proc.stdin.fileno(), False)
        os.set_blocking(self._proc.stdout.fileno(), False)
        try:
            self._loop = asyncio.get_running_loop()
            self._loop.add_reader(self._proc.stdout.fileno(), self._read_counts)
        except RuntimeError:  # not on a loop (a script): the pipe is written as the items come
            self._loop = None
            os.set_blocking(self._proc.stdin.fileno(), True)
        return True

    def _flush(self) -> None:
        """What was gathered goes now (the timer's callback, a close, the end)."""
        self._cancel_flush()
        if not self._watching:  # else the loop writes the rest as the pipe drains
            self._write()

    def _write(self) -> None:
        """As much as the pipe takes now; the rest when the loop says it is writable."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        fd = proc.stdin.fileno()
        pending = self._pending
        try:
            while pending:
                frame = pending[0]
                sent = os.write(fd, frame)
                if sent < len(frame):
                    pending[0] = frame[sent:]
                    break
                pending.popleft()
        except BlockingIOError:
            pass
        except OSError as exc:  # the child is gone: what waited for it goes too
            logger.error("recording writer process: its pipe failed (%s); %d items lost", exc, len(pending))
            pending.clear()
        if pending and not self._watching and self._loop is not None:
            self._loop.add_writer(fd, self._write)
            self._watching = True
        elif not pending and self._watching:
            self._stop_watching()

    def _cancel_flush(self) -> None:
        if self._flush_due is not None:
            self._flush_due.cancel()
            self._flush_due = None

    def _stop_watching(self) -> None:
        if self._watching and self._loop is not None and self._proc is not None and self._proc.stdin:
            with contextlib.suppress(Exception):
                self._loop.remove_writer(self._proc.stdin.fileno())
        self._watching = False

    def _read_counts(self) -> None:
        proc = self._proc
        if proc is None or proc.stdout is None:
            return
        try:
            data = os.read(proc.stdout.fileno(), 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the child closed its end: stop listening
            with contextlib.suppress(Exception):
                if self._loop is not None:
                    self._loop.remove_reader(proc.stdout.fileno())
            return
        if stored := data.count(b"C"):
            metrics.RECORDING_CHUNKS_WRITTEN.inc(stored)

    # --- the end ----------------------------------------------------------------------------------
    async def aclose(self, timeout: float) -> None:
        """What waits goes to the child, which writes it out and closes every recording; at most
        ``timeout`` seconds, then it is killed (its chunks so far are stored)."""
        proc = self._proc
        if proc is None:
            return
        deadline = time.monotonic() + timeout
        self._flush()
        while self._pending and proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # the loop's writer callback empties it
        self._stop_watching()
        with contextlib.suppress(Exception):
            if self._loop is not None and proc.stdout is not None:
                self._loop.remove_reader(proc.stdout.fileno())
        await asyncio.to_thread(self._finish, proc, max(0.1, deadline - time.monotonic()))

    def _finish(self, proc: subprocess.Popen, timeout: float) -> None:
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()  # the child's end of input: it drains and exits
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            logger.warning("recording writer process did not finish within %.1f s: stopped", timeout)
            proc.kill()
            proc.wait(5)
        if proc.stdout is not None:
            with contextlib.suppress(OSError):
                os.set_blocking(proc.stdout.fileno(), True)
                if stored := proc.stdout.read().count(b"C"):
                    metrics.RECORDING_CHUNKS_WRITTEN.inc(stored)
        self._proc = None

    def stop(self, timeout: float = 5.0) -> None:
        """Off the loop (a script, a test): the same end, waiting here."""
        proc = self._proc
        if proc is None:
            return
        self._cancel_flush()
        if proc.stdin is not None and self._pending:
            with contextlib.suppress(OSError):
                os.set_blocking(proc.stdin.fileno(), True)
                while self._pending:
                    frame = self._pending.popleft()
                    while frame:
                        frame = frame[os.write(proc.stdin.fileno(), frame) :]
        self._finish(proc, timeout)
