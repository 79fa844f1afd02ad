"""Declarations of the call-recording variables: whether conversations are recorded, where the
recordings go and how they are cut into chunks (:mod:`voiceagent.recording`)."""

from __future__ import annotations

from .parsing import Var, boolean, integer, string

V = Var  # short: the table reads one declaration per call


def writer_kind(raw: str) -> str:
    """process or thread."""
    value = raw.strip().lower()
    if value not in ("process", "thread"):
        raise ValueError("accepts process or thread")
    return value


def sample_rate(raw: str) -> int:
    """16000 or 8000, as an int (the writer's resamplers take it as is)."""
    value = raw.strip()
    if value not in ("16000", "8000"):
        raise ValueError("accepts 16000 or 8000")
    return int(value)


RECORDING: tuple[Var, ...] = (
    V(
        "RECORDING_ENABLED",
        "false",
        boolean,
        "Record conversations (both sides as heard: caller left, agent right); a scenario's "
        "`recording: true` or `false` decides for its own conversations",
        group="recording",
        tunable=True,
    ),
    V(
        "RECORDING_DIR",
        "var/recordings",
        string,
        "Folder of the default recordings storage (`STORAGES['recordings']`, a FileSystemStorage; a "
        "relative path is under the project root)",
        group="recording",
    ),
    V(
        "RECORDING_SAMPLE_RATE",
        "16000",
        sample_rate,
        "Sample rate of the recordings (Hz)",
        group="recording",
    ),
    V(
        "RECORDING_CHUNK_S",
        "5",
        integer(1, 60),
        "Seconds of audio per stored chunk: a crashed worker loses at most the last chunk",
        group="recording",
    ),
    V(
        "RECORDING_WRITER",
        "process",
        writer_kind,
        "Where recordings are resampled and stored: `process` (a writer process per server process, "
        "fed through a pipe: the event loop never shares its interpreter with that work) or "
        "`thread` (a thread of the server process)",
        group="recording",
    ),
    V(
        "RECORDING_QUEUE_MAX",
        "1000",
        integer(10, 1000000),
        "Audio items waiting for the recording writer per process; when full, items are dropped "
        "(counted in `voiceagent_recording_dropped_total`), the call never waits",
        group="recording",
    ),
)
