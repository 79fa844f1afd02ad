"""LiveKit's on-device end-of-turn model behind a pipe, for bench/bench_vs_peers_turn.py.

Runs in LiveKit's own venv (never the service's): ``turn-detector-v1-mini`` from
``livekit-local-inference`` (its weights ship inside that wheel), the model LiveKit Agents'
``TurnDetector`` runs when no LiveKit Cloud inference is configured. On start it prints one JSON
line: the policy LiveKit Agents applies to the model's answer, read from the installed package
(the English "unlikely" threshold, the silence its VAD must have counted before it asks, the
audio it hears, the endpointing delays of a streaming turn detector), so the bench judges with
LiveKit's own numbers, not copies of them. Then, per request on stdin (uint32 LE sample count,
then that many 16 kHz int16 samples), one line on stdout: ``<probability> <wall ms>``.
"""

from __future__ import annotations

import importlib.metadata
import json
import struct
import sys
import time

import numpy as np
from livekit.agents.inference.eot import base, transports
from livekit.agents.inference.eot.languages import LOCAL_LANGUAGES
from livekit.agents.voice.turn import _STREAMING_ENDPOINTING_DEFAULTS
from livekit.local_inference import EOT, EOT_MAX_SAMPLES


def main() -> None:
    model = EOT()
    model.predict(np.zeros(EOT_MAX_SAMPLES, np.int16))  # load the weights before the first request
    policy = {
        "livekit_agents": importlib.metadata.version("livekit-agents"),
        "livekit_local_inference": importlib.metadata.version("livekit-local-inference"),
        "model": "turn-detector-v1-mini",
        "unlikely_threshold": LOCAL_LANGUAGES["en"],
        "asked_after_silence_ms": base.MIN_SILENCE_DURATION_MS,
        "hears_s": transports._CLIENT_BUFFER_SECONDS,
        "min_delay_s": _STREAMING_ENDPOINTING_DEFAULTS["min_delay"],
        "max_delay_s": _STREAMING_ENDPOINTING_DEFAULTS["max_delay"],
        "max_samples": EOT_MAX_SAMPLES,
    }
    out = sys.stdout
    out.write(json.dumps(policy) + "\n")
    out.flush()
    inp = sys.stdin.buffer
    while header := inp.read(4):
        (count,) = struct.unpack("<I", header)
        pcm = np.frombuffer(inp.read(2 * count), "<i2")[-EOT_MAX_SAMPLES:]
        began = time.perf_counter()
        probability = float(model.predict(np.ascontiguousarray(pcm)))
        out.write(f"{probability:.4f} {(time.perf_counter() - began) * 1000:.1f}\n")
        out.flush()


if __name__ == "__main__":
    main()
