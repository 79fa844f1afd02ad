"""100 concurrent simulated phone calls on the telephony media stream of ONE server process, 20 ms frames
in real time, in the provider's wire format: ACS (``--wire acs``, the default) or Twilio Media
Streams (``--wire twilio``).

Each call opens ``/api/v1/media/stream?scenario=default`` the way a simulator does (no
``x-ms-call-connection-id``, no ``TELEPHONY_MEDIA_AUDIENCE``: the server creates the session), sends
``AudioMetadata`` (16 kHz), lets the greeting play, then per turn speaks ~0.6 s of voiced frames and
keeps sending silence frames (base64 PCM16LE in ``AudioData``, as the provider does) while it listens.
The server runs the real transport (:mod:`calls.media`), engine, VAD (webrtcvad) and session store,
with instant scripted STT/LLM/TTS (bench/plugins/instant_providers.py), so the figures are our
overhead:

* latency: "end of turn" is when the client sends the frame that completes ``VAD_SILENCE_TIMEOUT``
  of silence (as in bench_browser.py); the clock stops when the first outbound ``AudioData`` of the
  answer arrives. Targets (the browser bench's): p50 <= 10 ms, p99 <= 40 ms.
* pacing: outbound ``AudioData`` is sent 20 ms apart after a lead of ``LEAD_FRAMES`` (3) frames, so
  the first 4 frames of an answer arrive together by design; the jitter is |gap - 20 ms| over the
  gaps after them (frame i - frame i-1 for i >= 4), reported as p99 over all answers.
* errors: connection failures, server closes, turns without an answer, ``StopAudio`` during a turn,
  answer audio arriving before the end of the turn, and WARNING/ERROR lines in the server log.

With ``--wire twilio`` each call is answered as Twilio answers one: a signed voice webhook
(``/api/v1/twilio/voice?scenario=default``) makes the session and returns TwiML; the stream the
TwiML names is opened with a signed upgrade, ``connected`` and ``start``, then 20 ms ``media``
frames of base64 mu-law at 8 kHz; the answer is outbound ``media`` (a ``clear`` counts as a
``StopAudio``; ``mark``s are echoed as Twilio does). The signatures and the webhook are outside the
timed path.

Prints one JSON line.

    .venv/bin/python bench/bench_media_stream.py [--calls 100] [--turns 4] [--wire acs|twilio]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import websockets

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT))
from harness import noise_frame, pct, server_problems, voice_frame  # noqa: E402
from servers import base_env, free_port, migrate, start, wait_http  # noqa: E402
from twilio_media_client import sign, twilio_sid  # noqa: E402

from voiceagent.speech.audio import ulaw_encode  # noqa: E402

FRAME_MS, RATE, SILENCE_MS = 20, 16000, 400
VOICE, NOISE = voice_frame(RATE, FRAME_MS), noise_frame(RATE, FRAME_MS)
VOICE_B64 = base64.b64encode(VOICE).decode()
NOISE_B64 = base64.b64encode(NOISE).decode()
LEAD_FRAMES = 3  # calls.media.LEAD_FRAMES: these frames follow the first one at once
GREETING_FRAMES = 150  # 3 s: the greeting (2.4 s: 8 words at 300 ms) plays out before the caller speaks
LISTEN_FRAMES = 150  # 3 s: the answer plays, the caller listens
TARGET_P50_MS, TARGET_P99_MS = 10, 40
TWILIO_ACCOUNT, TWILIO_TOKEN = "AC" + "b" * 32, "bench-twilio-token"


def _mulaw_b64(pcm: bytes) -> str:
    """A frame as Twilio carries it: mu-law at 8 kHz, base64."""
    return base64.b64encode(ulaw_encode(np.frombuffer(pcm, "<i2"))).decode()


TWILIO_VOICE_B64 = _mulaw_b64(voice_frame(8000, FRAME_MS))
TWILIO_NOISE_B64 = _mulaw_b64(noise_frame(8000, FRAME_MS))

by_turn: dict[int, list[float]] = {}


def metadata(call: int) -> str:
    return json.dumps(
        {
            "kind": "AudioMetadata",
            "audioMetadata": {
                "subscriptionId": f"bench-sub-{call}",
                "encoding": "PCM",
                "sampleRate": RATE,
                "channels": 1,
                "length": len(VOICE),
            },
        }
    )


def audio_message(data_b64: str, participant: str) -> str:
    """One inbound ``AudioData`` message; built by hand, json.dumps per frame would load the client."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    return (
        '{"kind":"AudioData","audioData":{"timestamp":"' + stamp + '","participantRawID":"' + participant
        + '","data":"' + data_b64 + '","silent":false}}'
    )  # fmt: skip


def close_text(exc: websockets.ConnectionClosed) -> str:
    rcvd = exc.rcvd
    return f"{rcvd.code} {rcvd.reason}".strip() if rcvd is not None else "no close frame"


class Results:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.jitter: list[float] = []  # |gap - 20 ms| after the lead, all answers
        self.frames_per_answer: list[int] = []
        self.answers = 0
        self.errors: collections.Counter[str] = collections.Counter()
        self.closes: collections.Counter[str] = collections.Counter()
        self.greeting_frames: list[int] = []


class AcsWire:
    """The ACS media stream in simulator mode: the server makes the session."""

    audio, stop = "AudioData", "StopAudio"
    voice, noise = VOICE_B64, NOISE_B64

    def __init__(self, base: str, call: int) -> None:
        self.url = f"{base}/api/v1/media/stream?scenario=default"
        self.headers: dict[str, str] = {}
        self.call = call
        self.participant = f"4:+1555{call:07d}"

    async def answer(self) -> None:
        """Nothing to do before the stream (no call: a simulator stream)."""

    def kind(self, message: dict) -> str | None:
        return message.get("kind")

    def opening(self) -> list[str]:
        return [metadata(self.call)]

    def frame(self, data_b64: str) -> str:
        return audio_message(data_b64, self.participant)


class TwilioWire:
    """A Twilio call: the signed voice webhook, then the stream its TwiML names, signed."""

    audio, stop = "media", "clear"
    voice, noise = TWILIO_VOICE_B64, TWILIO_NOISE_B64

    def __init__(self, base: str, call: int) -> None:
        self.http = base.replace("ws://", "http://", 1)
        self.call_sid, self.stream_sid = twilio_sid("CA"), twilio_sid("MZ")
        self.url = f"{base}/api/v1/twilio/stream"
        self.headers = {"X-Twilio-Signature": sign(TWILIO_TOKEN, self.url)}
        self.session_id = ""
        self.chunk = 0
        self.head = (
            '{"event":"media","streamSid":"' + self.stream_sid + '","media":{"track":"inbound","chunk":"'
        )

    async def answer(self) -> None:
        url = f"{self.http}/api/v1/twilio/voice?scenario=default"
        form = {
            "AccountSid": TWILIO_ACCOUNT,
            "CallSid": self.call_sid,
            "From": "+15550100100",
            "To": "+15550001111",
        }
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.post(
                url, data=form, headers={"X-Twilio-Signature": sign(TWILIO_TOKEN, url, form)}
            )
        response.raise_for_status()
        self.session_id = response.text.split('name="session_id" value="')[1].split('"')[0]

    def kind(self, message: dict) -> str | None:
        return message.get("event")

    def opening(self) -> list[str]:
        start = {
            "accountSid": TWILIO_ACCOUNT,
            "streamSid": self.stream_sid,
            "callSid": self.call_sid,
            "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            "customParameters": {"session_id": self.session_id},
        }
        connected = {"event": "connected", "protocol": "Call", "version": "1.0.0"}
        return [
            json.dumps(connected),
            json.dumps({"event": "start", "start": start, "streamSid": self.stream_sid}),
        ]

    def frame(self, data_b64: str) -> str:
        self.chunk += 1
        return (
            self.head
            + str(self.chunk)
            + '","timestamp":"'
            + str(self.chunk * FRAME_MS)
            + '","payload":"'
            + data_b64
            + '"}}'
        )


WIRES = {"acs": AcsWire, "twilio": TwilioWire}


async def client(wire, call: int, turns: int, rng: random.Random, res: Results) -> None:
    loop = asyncio.get_running_loop()
    voice, noise = wire.voice, wire.noise
    await asyncio.sleep(rng.uniform(0, 2))
    try:
        await wire.answer()
        async with websockets.connect(wire.url, max_size=2**22, additional_headers=wire.headers) as ws:
            # per turn: arrival times of outbound AudioData after the end of the turn
            state: dict = {"turn": None, "turn_end": None, "speaking": False, "done": False}
            arrivals: dict[int, list[float]] = {}
            greeting = [0]

            async def reader() -> None:
                try:
                    async for raw in ws:
                        now = loop.time()
                        m = json.loads(raw)
                        kind = wire.kind(m)
                        turn = state["turn"]
                        if kind == wire.audio:
                            if turn is None:
                                greeting[0] += 1
                            elif state["turn_end"] is not None:
                                arrivals.setdefault(turn, []).append(now)
                            elif state["speaking"]:
                                res.errors["AudioData while the caller speaks (before the end of turn)"] += 1
                        elif kind == "mark":  # Twilio: played up to here (we play at once)
                            await ws.send(raw)
                        elif kind == wire.stop:
                            res.errors[f"StopAudio {'in the greeting' if turn is None else 'in a turn'}"] += 1
                        else:
                            res.errors[f"unexpected message {str(kind or m.get('type'))[:40]}"] += 1
                except websockets.ConnectionClosed as exc:
                    if not state["done"]:
                        res.closes[close_text(exc)] += 1
                        res.errors[f"closed by the server mid-call: {close_text(exc)}"] += 1

            read_task = asyncio.create_task(reader())
            next_at = loop.time()

            async def frame(data_b64: str) -> None:
                nonlocal next_at
                next_at += FRAME_MS / 1000
                delay = next_at - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                await ws.send(wire.frame(data_b64))

            for message in wire.opening():
                await ws.send(message)
            for _ in range(GREETING_FRAMES):
                await frame(noise)
            res.greeting_frames.append(greeting[0])
            for t in range(turns):
                state.update(turn=t, turn_end=None, speaking=True)
                for _ in range(rng.randint(25, 35)):  # 0.5 .. 0.7 s of speech
                    await frame(voice)
                for i in range(SILENCE_MS // FRAME_MS):
                    await frame(noise)
                    if i == SILENCE_MS // FRAME_MS - 1:
                        state.update(turn_end=loop.time(), speaking=False)
                for _ in range(LISTEN_FRAMES):
                    await frame(noise)
                times = arrivals.get(t, [])
                if not times:
                    res.errors["no answer within 3 s of the end of turn"] += 1
                    continue
                res.answers += 1
                res.latencies.append((times[0] - state["turn_end"]) * 1000)
                by_turn.setdefault(t, []).append(res.latencies[-1])
                res.frames_per_answer.append(len(times))
                gaps = [(times[i] - times[i - 1]) * 1000 for i in range(LEAD_FRAMES + 1, len(times))]
                res.jitter += [abs(gap - FRAME_MS) for gap in gaps]
            state["done"] = True
            read_task.cancel()
    except websockets.ConnectionClosed as exc:
        res.errors[f"send failed, closed: {close_text(exc)}"] += 1
    except (OSError, websockets.InvalidHandshake, TimeoutError, httpx.HTTPError) as exc:
        res.errors[f"connect failed: {type(exc).__name__}: {str(exc)[:80]}"] += 1


async def run(base: str, calls: int, turns: int, wire: str) -> Results:
    res = Results()
    rng = random.Random(3)
    await asyncio.gather(
        *(client(WIRES[wire](base, i), i, turns, random.Random(rng.random()), res) for i in range(calls))
    )
    return res


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--wire", choices=sorted(WIRES), default="acs")
    args = parser.parse_args()
    port = free_port()
    twilio = {
        "TWILIO_ACCOUNT_SID": TWILIO_ACCOUNT,
        "TWILIO_AUTH_TOKEN": TWILIO_TOKEN,
        "BASE_URL": f"http://127.0.0.1:{port}",
    }
    with tempfile.TemporaryDirectory() as tmp:
        env = base_env(
            Path(tmp),
            LOG_LEVEL="WARNING",
            VAD_SILENCE_TIMEOUT=str(SILENCE_MS),
            # the end of turn this bench times from is VAD_SILENCE_TIMEOUT of silence: the end-of-turn
            # model would end some turns at the first pause, and their answers would start "early"
            TURN_MODEL="none",
            LIFECYCLE_PLUGINS="instant_providers",
            TELEPHONY_MAX_STREAMS="1000",
            TELEPHONY_STREAMING_MODE="MEDIA",
            PYTHONPATH=f"{ROOT}:{ROOT / 'bench' / 'plugins'}",
            **(twilio if args.wire == "twilio" else {}),
        )
        env.pop("TELEPHONY_MEDIA_AUDIENCE", None)  # simulator mode: the server creates the sessions
        migrate(env)
        log = Path(tmp) / "server.log"
        proc = start("uvicorn", port, env, log)
        try:
            wait_http(f"http://127.0.0.1:{port}/api/v1/ready", timeout=30, status=200)
            res = asyncio.run(run(f"ws://127.0.0.1:{port}", args.calls, args.turns, args.wire))
        except BaseException:
            sys.stderr.write(log.read_text(errors="replace")[-4000:] if log.exists() else "")
            raise
        finally:
            proc.terminate()
            try:
                proc.wait(20)
            except Exception:
                proc.kill()
                proc.wait(10)
        problems = server_problems(log)
    errors = [f"{what} (x{n})" for what, n in res.errors.most_common()] + problems
    p50, p99 = pct(res.latencies, 50), pct(res.latencies, 99)
    expected = args.calls * args.turns
    print(
        json.dumps(
            {
                "bench": "media_stream",
                "wire": args.wire,
                "calls": args.calls,
                "turns": args.turns,
                "latency_p50_ms": p50,
                "latency_p99_ms": p99,
                "latency_max_ms": round(max(res.latencies), 2) if res.latencies else None,
                "latency_p99_ms_by_turn": {t: pct(v, 99) for t, v in sorted(by_turn.items())},
                "pacing_jitter_p50_ms": pct(res.jitter, 50),
                "pacing_jitter_p99_ms": pct(res.jitter, 99),
                "pacing_jitter_max_ms": round(max(res.jitter), 2) if res.jitter else None,
                "pacing_gaps": len(res.jitter),
                "frames_per_answer": sorted(set(res.frames_per_answer)),
                "greeting_frames": sorted(set(res.greeting_frames)),
                "answers": res.answers,
                "expected_answers": expected,
                "closes": dict(res.closes),
                "errors": errors,
                "targets": {"latency_p50_ms": TARGET_P50_MS, "latency_p99_ms": TARGET_P99_MS},
                "server": "uvicorn, 1 worker, instant providers, real VAD/engine/media transport",
                "client": "another process on the same machine",
                "ok": res.answers == expected
                and not errors
                and p50 is not None
                and p50 <= TARGET_P50_MS
                and p99 is not None
                and p99 <= TARGET_P99_MS,
            }
        )
    )


if __name__ == "__main__":
    main()
