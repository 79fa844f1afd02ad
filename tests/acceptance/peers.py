"""The outside world a deployment talks to, on 127.0.0.1: the telephony provider (the local ACS
REST peer, tests/support/acs_peer.py), the signing keys of its media-stream JWTs (a JWKS served
over HTTP, tokens signed here as the provider signs them), and the realtime voice API the
contact-center bridge needs (tests/support/realtime_peer.py as its own process, so its VAD and
streaming never share a loop with the callers' pacing)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

from acs_peer import AcsPeer, telephony_env
from jwks_issuer import JwksIssuer
from servers import ROOT

AUDIENCE = "acceptance-acs-resource-id"
REALTIME_KEY = "acceptance-realtime-key"
REALTIME_MODEL = "gpt-realtime"
ANSWER = "Sure, I can help you with that today."  # the realtime peer's spoken answer


class RealtimeProcess:
    """tests/support/realtime_peer.py in its own process; it answers every turn with :data:`ANSWER`."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "tests" / "support" / "realtime_peer.py"),
                "--api-key",
                REALTIME_KEY,
                "--text",
                ANSWER,
                "--chunks",
                "6",
                "--chunk-ms",
                "200",
                "--interval",
                "0.1",
            ],
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            text=True,
        )
        line = self.proc.stdout.readline().strip() if self.proc.stdout else ""
        if not line.startswith("READY "):
            self.close()
            raise RuntimeError(f"the realtime peer did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


class Peers:
    """Every peer, started once per test session."""

    def __init__(self) -> None:
        self.acs = AcsPeer().start()
        self.jwks = JwksIssuer(AUDIENCE, kid="acceptance")
        self.realtime = RealtimeProcess()

    def env(self) -> dict[str, str]:
        """The deployment's variables that point it at the peers, as an operator sets them."""
        return {
            **telephony_env(self.acs),
            "TELEPHONY_MEDIA_AUDIENCE": AUDIENCE,
            "TELEPHONY_MEDIA_JWKS_URL": self.jwks.url,
            "REALTIME_PROVIDER": "voicelive",
            "CLOUD_REALTIME_VOICE_ENDPOINT": self.realtime.url,
            "CLOUD_REALTIME_VOICE_API_KEY": REALTIME_KEY,
            "CLOUD_REALTIME_VOICE_MODEL": REALTIME_MODEL,
        }

    def close(self) -> None:
        self.realtime.close()
        self.jwks.close()
        self.acs.stop()
