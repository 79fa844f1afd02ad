"""A burst: N callers who stop speaking at the same moment on ONE server process (issue 30, point 2).

The service as ``scripts/run`` starts it (daphne, one process, Whisper tiny.en in its recogniser
process, Piper, the offline rules dialog; default settings but ``ENDPOINTING_MAX_MS`` = the VAD
silence, as bench_capacity: every turn ends after the same silence, so what is timed is
recognition, not the turn-taking rule's deliberate wait after "my code is"). N browser-socket
callers (bench/capacity_caller.py's sans-I/O client) connect, let the greeting play, then - all at
once - say a different line each, in voices the service does not speak with (espeak-ng and flite,
bench/offline_speech_corpus.py). ``--align end`` (default) starts each line so that every caller
stops speaking in the same 20 ms frame (the worst case: every final is wanted at once);
``--align start`` starts them together. After the answer has played, the next round.

Per caller and round: the time from the frame holding its last speech energy (the last 20 ms of the
line with an RMS above 300) to the final transcript on the socket. Printed: slowest and median,
how many within the target, WER of the finals (offline_speech_corpus's scoring), refusals and
errors, the recogniser's queue as the server counts it (``GET /api/v1/pools`` -> ``stt.queue``:
depth, wait, decode time, what was served, batched, skipped: a slow burst with short decodes is the
queue, with long ones the machine), and the machine's speed.

``--hog``: a busy-loop process pinned to core 1 for the whole run (another job on one of the two
cores). Targets: 12 at once, slowest <= 1.5 s; 24 at once <= 3 s; 12 with the hog <= 3 s; every
caller gets its final transcript (degrade, never drop).

    flock /tmp/voiceagent-bench.lock .venv/bin/python bench/bench_stt_burst.py --callers 12 [--hog]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests" / "support")]
import proc_cpu  # noqa: E402
from bench_capacity import log_problems, server  # noqa: E402
from capacity_caller import FRAME_BYTES, NOISE, Plan, Results, _Caller  # noqa: E402
from offline_speech_corpus import (  # noqa: E402
    IN_DOMAIN,
    OUT_OF_DOMAIN,
    VOICES,
    available,
    edit_distance,
    normalise,
    synthesise,
)
from websockets.uri import parse_uri  # noqa: E402

ENDS_THE_CONVERSATION = frozenset({"no thank you thats all"})

TARGETS_S = {(12, False): 1.5, (24, False): 3.0, (12, True): 3.0}
SPEECH_RMS = 300.0
FINAL_TIMEOUT_S = 20.0


def last_speech_frame(pcm: np.ndarray) -> int:
    """Index of the last 20 ms frame of ``pcm`` with speech energy."""
    n = FRAME_BYTES // 2
    frames = len(pcm) // n + (len(pcm) % n > 0)
    rms = [np.sqrt(np.mean(pcm[i * n : (i + 1) * n].astype(float) ** 2)) for i in range(frames)]
    loud = [i for i, r in enumerate(rms) if r > SPEECH_RMS]
    return loud[-1] if loud else frames - 1


class Burst:
    """The callers' shared clock: a round starts when every caller is ready for it."""

    def __init__(self, callers: int, longest_frames: int, align: str) -> None:
        self.callers, self.longest, self.align = callers, longest_frames, align
        self.ready: dict[int, set[int]] = {}
        self.start_at: dict[int, float] = {}

    def arrive(self, round_: int, caller: int) -> None:
        self.ready.setdefault(round_, set()).add(caller)
        self._start_when_ready()

    def leave(self) -> None:
        """A caller whose conversation ended: the next rounds no longer wait for it."""
        self.callers -= 1
        self._start_when_ready()

    def _start_when_ready(self) -> None:
        for round_, ready in self.ready.items():
            if len(ready) >= self.callers and round_ not in self.start_at:
                self.start_at[round_] = time.monotonic() + 0.5

    def offset_frames(self, frames: int) -> int:
        return self.longest - frames if self.align == "end" else 0


class BurstCaller(_Caller):
    """A capacity caller whose turns start on the burst's clock; it times its last speech frame."""

    burst: Burst
    lines: list[tuple[str, np.ndarray]]
    rounds: int

    def _script(self) -> Iterator[bytes]:
        listener, res = self.listener, self.res
        began = time.monotonic()
        while not listener.answered(time.monotonic()) and time.monotonic() - began < 20.0:
            yield NOISE  # the greeting plays
        for r in range(self.rounds):
            said, pcm = self.lines[(self.index + r * self.burst.callers) % len(self.lines)]
            data = pcm.astype("<i2").tobytes()
            frames = -(-len(data) // FRAME_BYTES)
            last = last_speech_frame(pcm)
            self.burst.arrive(r, self.index)
            while r not in self.burst.start_at or time.monotonic() < self.burst.start_at[r]:
                yield NOISE
            for _ in range(self.burst.offset_frames(frames)):
                yield NOISE
            listener.reset(True)
            spoke_end = None
            for i in range(frames):
                yield data[i * FRAME_BYTES : (i + 1) * FRAME_BYTES].ljust(FRAME_BYTES, b"\0")
                if i == last:
                    spoke_end = self.sent_at  # the frame just written holds the last speech energy
            listener.turn_over()
            while listener.final is None and time.monotonic() - spoke_end < FINAL_TIMEOUT_S:
                if listener.errors and time.monotonic() - spoke_end > 2.0:
                    break
                yield NOISE
            final = listener.final
            res.turns.append(
                {
                    "caller": self.index,
                    "round": r,
                    "said": said,
                    "heard": final[1] if final else None,
                    "final_s": round(final[0] - spoke_end, 3) if final else None,
                    "errors": list(listener.errors),
                }
            )
            waited = time.monotonic()
            while not listener.answered(time.monotonic()) and time.monotonic() - waited < 15.0:
                yield NOISE  # the answer plays before the next round
            if listener.ended:
                res.errors["conversation ended by the agent"] += 1
                break


async def run_callers(url: str, burst: Burst, lines: list, rounds: int) -> Results:
    res = Results()
    loop = asyncio.get_running_loop()
    uri = parse_uri(url)
    plan = Plan(url, [], 0, 500, spread_s=0.0)

    async def one(index: int) -> None:
        done = loop.create_future()
        me = BurstCaller(plan, index, res, done)
        me.burst, me.lines, me.rounds = burst, lines, rounds
        await asyncio.sleep(index * 0.05)  # connections ramp in over a moment; the speech does not
        try:
            await asyncio.wait_for(loop.create_connection(lambda: me, uri.host, uri.port), 10.0)
            await asyncio.wait_for(me.opened, 10.0)
        except Exception as exc:  # counted, never raised: the other callers go on
            res.errors[f"connect failed: {type(exc).__name__}"] += 1
            burst.leave()
            return
        me.start_sending()
        try:
            await done
        finally:
            burst.leave()  # done (or closed by the server): the next rounds no longer wait for it
            me.closing = True
            me.hang_up()
        with contextlib.suppress(TimeoutError):  # the close handshake
            await asyncio.wait_for(asyncio.shield(me.lost), 5.0)

    await asyncio.gather(*(one(i) for i in range(burst.callers)))
    return res


def hog() -> None:
    """A busy loop on core 1: another job holding one of the two cores."""
    os.sched_setaffinity(0, {1 % (os.cpu_count() or 1)})
    x = 0
    while True:
        x += 1


def wer(turns: list[dict]) -> float | None:
    errors = words = 0
    for t in turns:
        ref = normalise(t["said"])
        errors += edit_distance(ref, normalise(t["heard"] or ""))
        words += len(ref)
    return round(errors / words, 3) if words else None


def queue_stats(base: str) -> dict | None:
    try:
        body = httpx.get(base.replace("ws://", "http://") + "/api/v1/pools", timeout=10).json()
    except (httpx.HTTPError, ValueError) as exc:
        return {"error": str(exc)[:80]}
    return body.get("pools", {}).get("stt", {}).get("queue")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--callers", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2, help="bursts, one after the other")
    parser.add_argument("--align", choices=("end", "start"), default="end")
    parser.add_argument("--hog", action="store_true", help="a busy loop pinned to core 1 throughout")
    parser.add_argument("--server", choices=("daphne", "uvicorn"), default="daphne")
    parser.add_argument("--target-s", type=float, help="default: 1.5 (12), 3 (24 or with --hog)")
    parser.add_argument("--server-log", help="the server logs at INFO; its log is copied here")
    parser.add_argument("--details", type=Path, help="write each caller's turns (said, heard, times) as JSON")
    args = parser.parse_args()
    target = args.target_s or TARGETS_S.get((args.callers, args.hog), 3.0)
    command = ".venv/bin/python bench/bench_stt_burst.py " + " ".join(sys.argv[1:])
    load, speed = os.getloadavg()[0], proc_cpu.python_speed()
    voices = [v for v in VOICES if available(v)]
    # every line but the one that rightly ends the conversation (the default dialog says goodbye to
    # "no thank you that's all"): a caller who left would be missing from the next rounds
    texts = [t for t in IN_DOMAIN + OUT_OF_DOMAIN if t not in ENDS_THE_CONVERSATION]
    lines = [(t, synthesise(voices[i % len(voices)], t, 1.0)) for i, t in enumerate(texts)]
    longest = max(-(-len(p) * 2 // FRAME_BYTES) for _, p in lines)
    hogger = None
    if args.hog:
        hogger = multiprocessing.get_context("fork").Process(target=hog, daemon=True)
        hogger.start()
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            silence = os.environ.get("VAD_SILENCE_TIMEOUT", "500")
            env = {"ENDPOINTING_MAX_MS": os.environ.get("ENDPOINTING_MAX_MS", silence)}
            with server(args.server, Path(tmp_name), False, 1, args.server_log, **env) as (base, _, log):
                offset = log.stat().st_size
                burst = Burst(args.callers, longest, args.align)
                t0 = time.monotonic()
                res = asyncio.run(
                    run_callers(f"{base}/api/v1/browser/conversation", burst, lines, args.rounds)
                )
                wall = time.monotonic() - t0
                problems = log_problems(log, offset)
                queue = queue_stats(base)
    finally:
        if hogger is not None:
            hogger.kill()
            hogger.join(5)
    if args.details:
        args.details.write_text(json.dumps(res.turns, indent=1))
    got = [t["final_s"] for t in res.turns if t["final_s"] is not None]
    expected = args.callers * args.rounds
    per_round = {}
    for r in range(args.rounds):
        times = [t["final_s"] for t in res.turns if t["round"] == r and t["final_s"] is not None]
        per_round[r] = {"slowest_s": max(times) if times else None, "got": len(times)}
    figures = {
        "bench": "stt_burst",
        "callers": args.callers,
        "rounds": args.rounds,
        "align": args.align,
        "cpu_hog_on_core_1": args.hog,
        "target_slowest_s": target,
        "finals": f"{len(got)}/{expected}",
        "slowest_s": max(got) if got else None,
        "median_s": round(statistics.median(got), 3) if got else None,
        "within_target": f"{sum(g <= target for g in got)}/{expected}",
        "per_round": per_round,
        "pass": len(got) == expected and bool(got) and max(got) <= target,
        "wer": wer([t for t in res.turns if t["final_s"] is not None]),
        "errors": dict(res.errors),
        "error_messages": sorted({e for t in res.turns for e in t["errors"]}),
        "server_log": problems[:5],
        "recogniser_queue": queue,
        "wall_s": round(wall, 1),
        "server": f"{args.server}, 1 process, default settings but "
        f"ENDPOINTING_MAX_MS={env['ENDPOINTING_MAX_MS']}",
        "voices": [v.label for v in voices],
        "command": command,
        "load_average_before": round(load, 2),
        "machine_python_loop_ms": speed,
        "machine_cpu_isa": proc_cpu.cpu_isa(),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
