"""The recording writer process: ``python -m voiceagent.recording.writer_worker``.

Why a process: resampling, laying out and storing 200 conversations' audio in a thread of the
server shared its interpreter lock with the event loop (bench_capacity --recording: the server's
added latency rose and the queue overflowed). Here the same
:class:`~voiceagent.recording.writer.RecordingWriter` runs on its own interpreter: this process
reads item frames (:mod:`.writer_wire`) from its standard input into the writer's queue (waiting
when it is full: the server's side holds the bound), and tells the server each stored chunk with a
``C`` line on its standard output (its ``/metrics`` counts them). At the end of its input it writes
out what is queued, closes every recording and exits. Its log goes where the server's goes.
"""

from __future__ import annotations

import os
import sys
import threading


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "voiceagent.settings")
    import django

    django.setup()
    from voiceagent.recording.writer import STOP_DRAIN_S, RecordingWriter
    from voiceagent.recording.writer_wire import read_item

    out, lock = sys.stdout.buffer, threading.Lock()

    def stored() -> None:
        with lock:
            out.write(b"C\n")
            out.flush()

    writer = RecordingWriter(on_stored=stored)
    stdin = sys.stdin.buffer
    while (item := read_item(stdin)) is not None:
        writer.put(item)
    writer.stop(STOP_DRAIN_S)


if __name__ == "__main__":
    main()
