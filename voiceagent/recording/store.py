"""Reading recordings back, and removing old ones, through the ``recordings`` storage.

Why the WAV is put together on read: the writer stores headerless stereo PCM chunks so that a
crashed worker leaves a playable recording behind (no header to patch at the end). A session's
WAV is a 44-byte RIFF header, sized from the chunks' ``storage.size``, followed by every chunk of
every part (a conversation restarted on the same session id is a second part), in order. These
calls block (a disk, a bucket): the REST view runs them in a thread.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from voiceagent.recording.recorder import storage_safe
from voiceagent.recording.writer import FRONTIER_S, MANIFEST, STOP_DRAIN_S, storage

logger = logging.getLogger("voiceagent.recording")

HEADER_BYTES = 44
CHANNELS = 2


def wav_header(rate: int, data_bytes: int) -> bytes:
    """The RIFF/WAVE header of 16-bit stereo PCM at ``rate`` with ``data_bytes`` of samples."""
    block = CHANNELS * 2
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF",
        36 + data_bytes,
        b"WAVE",
        b"fmt ",
        16,
        1,
        CHANNELS,
        rate,
        rate * block,
        block,
        16,
        b"data",
        data_bytes,
    )


def _listdir(path: str) -> tuple[list[str], list[str]]:
    try:
        return storage().listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return [], []


def _manifest(part: str) -> dict[str, Any]:
    try:
        with storage().open(f"{part}/{MANIFEST}") as handle:
            value = json.loads(handle.read())
        return value if isinstance(value, dict) else {}
    except Exception:
        return {}  # a part whose manifest is missing or torn still plays (the default rate)


def parts(session_id: str) -> list[str]:
    """The session's recordings (``<sid>/<rid>``), oldest first; empty when there is none."""
    if not storage_safe(session_id):
        return []
    folders, _ = _listdir(session_id)
    return [f"{session_id}/{rid}" for rid in sorted(folders)]


@dataclass
class WavLayout:
    """A session's WAV as byte ranges: the header, then each chunk's ``(name, size)``."""

    rate: int
    chunks: list[tuple[str, int]] = field(default_factory=list)

    @property
    def data_bytes(self) -> int:
        return sum(size for _, size in self.chunks)

    @property
    def size(self) -> int:
        return HEADER_BYTES + self.data_bytes

    def read(self, start: int, stop: int) -> bytes:
        """Bytes ``start`` (inclusive) to ``stop`` (exclusive) of the WAV."""
        out = bytearray()
        if start < HEADER_BYTES:
            out += wav_header(self.rate, self.data_bytes)[start:stop]
        offset = HEADER_BYTES
        store = storage()
        for name, size in self.chunks:
            lo, hi = max(start, offset), min(stop, offset + size)
            if lo < hi:
                with store.open(name) as handle:
                    handle.seek(lo - offset)
                    out += handle.read(hi - lo)
            offset += size
            if offset >= stop:
                break
        return bytes(out)


def layout(session_id: str) -> WavLayout | None:
    """The session's WAV, or None when it has no recording. Parts recorded at another rate than
    the first (``RECORDING_SAMPLE_RATE`` changed between them) are left out, with a log line."""
    found = parts(session_id)
    if not found:
        return None
    store = storage()
    wav: WavLayout | None = None
    for part in found:
        rate = _manifest(part).get("sample_rate") or settings.CONFIG.RECORDING_SAMPLE_RATE
        if wav is None:
            wav = WavLayout(int(rate))
        elif rate != wav.rate:
            logger.warning("recording %s: at %s Hz, not %s Hz: left out of the WAV", part, rate, wav.rate)
            continue
        _, files = _listdir(part)
        for leaf in sorted(f for f in files if f.endswith(".pcm")):
            name = f"{part}/{leaf}"
            wav.chunks.append((name, store.size(name)))
    return wav


def being_written(session_id: str) -> bool:
    """Is a part of the session's recording still being written? The writer stores the last chunk
    and the manifest's ``ended_at`` after the conversation has ended (its items travel through a
    queue). A part whose writer died never gets ``ended_at``: once its newest file is older than a
    chunk plus the writer's drain and frontier, it plays as it is."""
    grace = float(settings.CONFIG.RECORDING_CHUNK_S) + STOP_DRAIN_S + FRONTIER_S
    store = storage()
    for part in parts(session_id):
        if _manifest(part).get("ended_at"):
            continue
        _, files = _listdir(part)
        try:
            newest = max(store.get_modified_time(f"{part}/{leaf}") for leaf in files)
        except (NotImplementedError, ValueError, OSError):
            continue  # a backend that cannot say, or no file: nothing to wait for
        if (timezone.now() - newest).total_seconds() < grace:
            return True
    return False


def purge(older_than: timedelta, dry_run: bool = False) -> list[tuple[str, int]]:
    """Remove the recordings started longer than ``older_than`` ago (the manifest's
    ``started_at``, else the files' modification time); ``(part, bytes)`` of each one."""
    store = storage()
    cutoff = datetime.now(UTC) - older_than
    removed: list[tuple[str, int]] = []
    sessions, _ = _listdir("")
    for session_id in sorted(sessions):
        for part in parts(session_id):
            _, files = _listdir(part)
            if _started(part, files) >= cutoff:
                continue
            names = [f"{part}/{leaf}" for leaf in files]
            removed.append((part, sum(store.size(name) for name in names)))
            if not dry_run:
                for name in names:
                    store.delete(name)
                _remove_folders(store, part)
    return removed


def _started(part: str, files: list[str]) -> datetime:
    started = _manifest(part).get("started_at")
    if isinstance(started, str):
        try:
            return datetime.fromisoformat(started)
        except ValueError:
            pass
    times = [storage().get_modified_time(f"{part}/{leaf}") for leaf in files]
    return min(times) if times else datetime.now(UTC)


def _remove_folders(store: Any, part: str) -> None:
    """A filesystem keeps empty folders behind; a bucket has none (nothing to do there)."""
    path = getattr(store, "path", None)
    if path is None:
        return
    for folder in (part, part.split("/")[0]):
        try:
            os.rmdir(store.path(folder))
        except (OSError, NotImplementedError):
            return
