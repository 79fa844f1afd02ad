"""Frame-level voice activity detection: webrtcvad behind an energy gate.

Runs on every 20 ms inbound frame of every conversation, so it does two C calls per frame and no
Python-level sample work: the gate (:func:`~voiceagent.speech.audio.frame_dbfs`, one C
call) and, only for frames loud enough to matter, webrtcvad's GMM classifier (~2 us).

The gate exists because webrtcvad judges spectral shape, not loudness: hiss, hum or a quiet TV on
a phone line can look "speech-like" at any level, and every false positive is a false barge-in
that cuts the agent off. Frames quieter than ``min_rms`` dBFS are never speech. -45 dBFS sits
well above the noise floor of a phone line (about -60 dBFS) and well below conversational speech
(about -30 to -15 dBFS at the codec).
"""

from __future__ import annotations

from typing import Final

import webrtcvad

from voiceagent.speech.audio import frame_bytes_for, frame_dbfs

__all__ = ["DEFAULT_MIN_RMS_DBFS", "VAD_FRAME_MS", "VAD_RATES", "VoiceActivityDetector"]

VAD_RATES: Final = (8000, 16000, 32000, 48000)  # what webrtcvad accepts
VAD_FRAME_MS: Final = (10, 20, 30)
DEFAULT_MIN_RMS_DBFS: Final = -45.0


class VoiceActivityDetector:
    """Decide speech / not speech for one fixed-size PCM16 mono frame at a time.

    ``aggressiveness`` is webrtcvad's mode, 0 (least likely to call noise non-speech) to 3 (most
    aggressive filtering of non-speech). ``min_rms`` is the energy gate in dBFS (<= 0): frames
    whose RMS level is below it are silence regardless of what webrtcvad thinks. Use ``-inf`` to
    disable the gate. One instance per stream is cheap; webrtcvad keeps a little state per
    instance, so do not share one between concurrent streams.
    """

    __slots__ = ("_frame_bytes", "_vad", "aggressiveness", "frame_ms", "min_rms", "sample_rate")

    def __init__(
        self,
        sample_rate: int = 16000,
        frame_ms: int = 20,
        aggressiveness: int = 2,
        min_rms: float = DEFAULT_MIN_RMS_DBFS,
    ):
        if sample_rate not in VAD_RATES:
            raise ValueError(f"VAD sample rate must be one of {VAD_RATES}, got {sample_rate!r}")
        if frame_ms not in VAD_FRAME_MS:
            raise ValueError(f"VAD frame must be 10, 20 or 30 ms, got {frame_ms!r}")
        if isinstance(aggressiveness, bool) or aggressiveness not in (0, 1, 2, 3):
            raise ValueError(f"VAD aggressiveness must be 0..3, got {aggressiveness!r}")
        min_rms = float(min_rms)
        if min_rms > 0:
            raise ValueError(f"min_rms is a level in dBFS and must be <= 0, got {min_rms!r}")
        self.sample_rate = sample_rate
        self.frame_ms = frame_ms
        self.aggressiveness = aggressiveness
        self.min_rms = min_rms
        self._frame_bytes = frame_bytes_for(sample_rate, frame_ms)
        self._vad = webrtcvad.Vad(aggressiveness)

    @property
    def frame_bytes(self) -> int:
        """Size in bytes of the one frame :meth:`is_speech` accepts (640 for 16 kHz, 20 ms)."""
        return self._frame_bytes

    @property
    def label(self) -> str:
        """What decides, for startup logs and ``/readiness`` (``VAD_PROVIDER=webrtc``)."""
        return f"webrtc (webrtcvad mode {self.aggressiveness}, gate {self.min_rms:g} dBFS)"

    def is_speech(self, frame: bytes) -> bool:
        """True when ``frame`` (exactly :attr:`frame_bytes` of PCM16) is loud enough and speech-like."""
        if len(frame) != self._frame_bytes:
            raise ValueError(
                f"VAD frame must be {self._frame_bytes} bytes ({self.frame_ms} ms at {self.sample_rate} Hz "
                f"PCM16 mono), got {len(frame)}"
            )
        if frame_dbfs(frame) < self.min_rms:
            return False
        return self._vad.is_speech(frame, self.sample_rate)

    def __repr__(self) -> str:
        return (
            f"VoiceActivityDetector(sample_rate={self.sample_rate}, frame_ms={self.frame_ms}, "
            f"aggressiveness={self.aggressiveness}, min_rms={self.min_rms:g})"
        )
