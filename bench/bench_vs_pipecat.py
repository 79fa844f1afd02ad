"""The service side by side with Pipecat 1.14: the same caller clip, instant providers on both
sides, Silero VAD on both, ONE server process each, runs interleaved (ours, pipecat, ours,
pipecat, ...) at each number of concurrent conversations.

- **Ours**: the service under uvicorn as the benches start it (bench_capacity.server: one process,
  default settings, no per-message deflate) with ``VAD_PROVIDER=silero`` and the instant scripted
  providers (bench/plugins/instant_providers.py: transcript "hello there" at the end of the turn,
  answer "Sure thing.", 300 ms of silent 24 kHz audio per word in 100 ms chunks), over the browser
  socket (docs/api.md).
- **Pipecat**: bench/pipecat_peer/server.py in its OWN venv (``--venv``, default
  var/bench-venvs/pipecat, made on first use with :data:`PIPECAT_REQUIREMENTS`; never a dependency
  of the service): one FastAPI/uvicorn process, one pipeline per WebSocket with Silero VAD in the
  user aggregator and twins of the same instant providers (bench/pipecat_peer/instant_services.py),
  raw PCM16 in and out (bench/pipecat_peer/raw_pcm_serializer.py). Both greet with the default
  scenario's greeting, both end a turn after the same silence (``--silence-ms``, the service's
  VAD_SILENCE_TIMEOUT; Pipecat: VAD stop 0.2 s + speech timeout the rest) at the same Silero
  threshold (0.5).
- **The caller** (bench/side_by_side_caller.py): an espeak-ng sentence, trimmed to its voiced part,
  said ``--turns`` times with ``--tail-s`` of faint noise after each (the answer plays), after
  ``--lead-s`` for the greeting; 20 ms frames in real time; the conversations start within
  ``--spread-s`` of each other, at the same offsets for both servers; one caller process.

Figures, per side and number of conversations (all rounds pooled):

- ``cpu_ms_per_session_s``: the server process's CPU (all its threads and children, from /proc)
  between the first caller's start and the last one's hang-up, divided by the callers' connected
  time summed (ms of CPU per second of one conversation).
- ``end_of_turn_ms`` p50/p95: from the instant the caller sent the frame holding the last sample of
  its speech to the first agent audio frame that reached the caller (wire to wire: it includes the
  Silero decision, the silence wait, the instant providers and each server's transport; the two
  servers decide on the same silence, so what differs is how late each notices it and how fast it
  turns the decision into audio on the socket).
- ``early`` (answer audio while the caller still spoke, the turn before answered) and ``missing``
  (no answer) turns, not timed; a late answer is timed, however late.
- ``server_cores``: the server's CPU seconds per wall second over the runs. ONE process each: a
  server near 1 core (the GIL) on a busy machine cannot take more; its conversations fall behind
  (end of turn in seconds) and its CPU per session-second then reads LOW, since the audio it never
  got to is dropped at the hang-up: ``saturated`` says so (end of turn p50 over twice the silence,
  or under 90 % of the turns timed), and that figure is a floor, not a cost.

What is NOT the same, by design or left as each framework ships it:

- Each server's own protocol: ours sends audio as base64 JSON ``audio`` messages of 100 ms plus its
  events (state, transcript, response, turn_metrics, ``audio_levels`` 10 a second); Pipecat sends
  raw PCM16 in 40 ms chunks (its default ``audio_out_10ms_chunks``) plus its RTVI events as JSON
  (on by default, ``--pipecat-no-rtvi`` turns them off; ~45 a conversation of 2 turns against our
  ~80 non-audio messages).
- The service's Silero sits behind its -45 dBFS energy gate: on the default -60 dBFS hiss between
  turns it skips the model and its end of speech is exact to the frame, where Pipecat runs the
  model on every 32 ms window and waits for its probability to fall. ``--noise-dbfs -40`` (above the
  gate) makes both run the model throughout.
- One ONNX session per process (ours) against one per conversation, each with its own inference
  thread (Pipecat's SileroVADAnalyzer); both with one intra-op thread, onnxruntime 1.32.0.
- The turn end is the same on both sides (``--turn-model``): ``none`` (the default) ends a turn on
  the silence alone (our ``TURN_MODEL=none``, Pipecat's speech-timeout strategy); ``smart-turn``
  runs Smart Turn v3.2 on both, each framework's default (ours asks it at 160 ms of silence and
  fuses it with the words; Pipecat's at its VAD's 0.2 s stop, ending the turn above 0.5). Until
  2026-12-02 our side ran its default Smart Turn against Pipecat's speech timeout: a second model
  on one side only (10 conversations: 31.7 against 83.6 ms of CPU a session-second).
- Both under uvicorn 0.54 + uvloop 0.23, without per-message deflate; websockets 15 (ours) and 17
  (Pipecat's own requirement). Loguru at WARNING on the Pipecat side (its default is DEBUG).

Targets (issue 30, point 6): ours <= 1/5 of Pipecat's CPU per session-second at every number of
conversations, and our end of turn p50 <= Pipecat's. Prints one JSON line; run it under
``flock /tmp/voiceagent-bench.lock``.

    .venv/bin/python bench/bench_vs_pipecat.py [--conversations 10,50] [--rounds 2] [--turns 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests" / "support")]
import proc_cpu  # noqa: E402
import side_by_side_caller as caller  # noqa: E402
from bench_capacity import espeak_speech, log_problems, server  # noqa: E402
from harness import pct  # noqa: E402
from peer_venv import peer_python  # noqa: E402
from servers import free_port  # noqa: E402

PIPECAT_VERSION = "1.14.0"
PIPECAT_REQUIREMENTS = (
    f"pipecat-ai[silero,websocket]=={PIPECAT_VERSION}",  # Silero's ONNX model ships in the wheel
    "uvicorn==0.54.0",  # the service's pins (requirements.txt): the same ASGI server and loop
    "uvloop==0.23.0",
)
SENTENCE = ("I would like to check the balance of my account", "en-us", 165)
GREETING = "Hi, thanks for calling. How can I help?"  # fixtures/agents/assistant/agent.yaml


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", default="10,50", help="concurrent conversations, comma-separated")
    parser.add_argument("--rounds", type=int, default=2, help="runs per side and number of conversations")
    parser.add_argument("--turns", type=int, default=5, help="turns per conversation")
    parser.add_argument("--lead-s", type=float, default=4.0, help="noise while the greeting plays")
    parser.add_argument("--tail-s", type=float, default=3.0, help="noise after each turn (the answer plays)")
    parser.add_argument(
        "--noise-dbfs", type=float, default=-60.0, help="background noise between turns (RMS dBFS)"
    )
    parser.add_argument("--spread-s", type=float, default=1.0, help="conversations start within this")
    parser.add_argument("--silence-ms", type=int, default=500, help="silence that ends a turn, both sides")
    parser.add_argument(
        "--venv", default=str(ROOT / "var" / "bench-venvs" / "pipecat"), help="Pipecat's venv"
    )
    parser.add_argument(
        "--pipecat-no-rtvi", action="store_true", help="Pipecat without its RTVI events (audio only)"
    )
    parser.add_argument(
        "--turn-model",
        default="none",
        choices=("none", "smart-turn"),
        help="end of turn on both sides: none (the silence alone: our TURN_MODEL=none, Pipecat's speech"
        " timeout) or smart-turn (Smart Turn v3.2 on both: our default, Pipecat's default)",
    )
    args = parser.parse_args(argv)
    args.conversations = [int(n) for n in str(args.conversations).split(",")]
    if args.rounds < 1 or args.turns < 1 or min(args.conversations) < 1:
        parser.error("--rounds, --turns and --conversations must be positive")
    return args


def start_pipecat(
    python: Path, silence_ms: int, log: Path, rtvi: bool = True, smart_turn: bool = False
) -> tuple[subprocess.Popen, int]:
    port = free_port()
    argv = [str(python), str(ROOT / "bench" / "pipecat_peer" / "server.py"), "--port", str(port)]
    argv += ["--silence-ms", str(silence_ms), "--greeting", GREETING] + ([] if rtvi else ["--no-rtvi"])
    argv += ["--smart-turn"] if smart_turn else []
    out = open(log, "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=out, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    line = proc.stdout.readline().decode().strip() if proc.stdout else ""
    if not line.startswith("READY "):
        proc.kill()
        raise RuntimeError(
            f"the Pipecat peer did not start: {line!r} {log.read_text(errors='replace')[-2000:]}"
        )
    return proc, port


def measure(pid: int, url: str, protocol: str, clip: caller.Clip, n: int, spread_s: float) -> dict:
    """One run: ``n`` conversations against one server; its CPU over the run."""
    me = proc_cpu.threads(os.getpid())
    cpu0, t0 = proc_cpu.process_tree(pid), time.monotonic()
    res = caller.run(url, protocol, clip, n, spread_s)
    wall = time.monotonic() - t0
    cpu = proc_cpu.process_tree(pid) - cpu0
    return {
        "cpu_s": round(cpu, 3),
        "server_cores": round(cpu / wall, 3),
        "session_s": round(res.session_s, 2),
        "wall_s": round(wall, 2),
        "cpu_ms_per_session_s": round(cpu * 1000 / res.session_s, 2) if res.session_s else None,
        "end_of_turn_ms": res.end_of_turn_ms,
        "early": res.early,
        "missing": res.missing,
        "errors": dict(res.errors),
        "caller_cpu_cores": round(sum((proc_cpu.threads(os.getpid()) - me).values()) / wall, 3),
        "caller_send_lag_ms_p99": pct(res.send_lag_ms, 99) if res.send_lag_ms else 0.0,
    }


def summarise(runs: list[dict]) -> dict:
    """The rounds of one side at one number of conversations, pooled."""
    eot = [ms for r in runs for ms in r["end_of_turn_ms"]]
    cpu, session = sum(r["cpu_s"] for r in runs), sum(r["session_s"] for r in runs)
    errors: dict[str, int] = {}
    for r in runs:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v
    return {
        "cpu_ms_per_session_s": round(cpu * 1000 / session, 2) if session else None,
        "cpu_ms_per_session_s_by_round": [r["cpu_ms_per_session_s"] for r in runs],
        "end_of_turn_ms": {"p50": pct(eot, 50), "p95": pct(eot, 95), "max": max(eot) if eot else None},
        "server_cores": max(r["server_cores"] for r in runs),
        "turns_timed": len(eot),
        "early": sum(r["early"] for r in runs),
        "missing": sum(r["missing"] for r in runs),
        "errors": errors,
        "caller_cpu_cores": max(r["caller_cpu_cores"] for r in runs),
        "caller_send_lag_ms_p99": max(r["caller_send_lag_ms_p99"] for r in runs),
    }


def saturated(side: dict, turns: int, silence_ms: int) -> bool:
    """The server fell behind its callers: its CPU per session-second is a floor, not a cost."""
    p50 = side["end_of_turn_ms"]["p50"]
    return side["turns_timed"] < 0.9 * turns or p50 is None or p50 > 2 * silence_ms


def compare(ours: dict, theirs: dict) -> dict:
    ratio = None
    if ours["cpu_ms_per_session_s"] and theirs["cpu_ms_per_session_s"]:
        ratio = round(theirs["cpu_ms_per_session_s"] / ours["cpu_ms_per_session_s"], 2)
    p50s = ours["end_of_turn_ms"]["p50"], theirs["end_of_turn_ms"]["p50"]
    later = round(p50s[0] - p50s[1], 2) if None not in p50s else None
    return {
        "cpu_ratio_pipecat_over_ours": ratio,
        "end_of_turn_p50_ours_minus_pipecat_ms": later,
        "cpu_target_met": ratio is not None and ratio >= 5,
        "end_of_turn_target_met": later is not None and later <= 0,
    }


def run(args: argparse.Namespace) -> dict:
    python = peer_python(Path(args.venv), "pipecat-ai", PIPECAT_VERSION, PIPECAT_REQUIREMENTS)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        text, voice, wpm = SENTENCE
        speech = espeak_speech(text, voice, wpm, tmp)
        clip = caller.make_clip(speech, args.turns, args.lead_s, args.tail_s, args.noise_dbfs)
        smart_turn = args.turn_model == "smart-turn"
        peer, port = start_pipecat(
            python, args.silence_ms, tmp / "pipecat.log", not args.pipecat_no_rtvi, smart_turn
        )
        extra = {
            "TURN_MODEL": args.turn_model,  # the same turn end on both sides
            "VAD_PROVIDER": "silero",
            "VAD_SILENCE_TIMEOUT": str(args.silence_ms),
            "LIFECYCLE_PLUGINS": "instant_providers",
            "BROWSER_MAX_CONNECTIONS": "1000",
            "PYTHONPATH": f"{ROOT}:{ROOT / 'bench' / 'plugins'}:{ROOT / 'tests' / 'support'}",
        }
        runs: dict[int, dict[str, list[dict]]] = {}
        try:
            with server("uvicorn", tmp, **extra) as (base, proc, log):
                urls = {
                    "ours": (proc.pid, f"{base}/api/v1/browser/conversation"),
                    "pipecat": (peer.pid, f"ws://127.0.0.1:{port}/ws"),
                }
                warm = caller.make_clip(speech, 1, args.lead_s, 1.0, args.noise_dbfs)
                for side, (_, url) in urls.items():  # imports and first-use work, before any figure
                    caller.run(url, side, warm, 2, 0.0)
                for n in args.conversations:
                    runs[n] = {"ours": [], "pipecat": []}
                    for _ in range(args.rounds):
                        for side in ("ours", "pipecat"):  # interleaved: drift on the machine hits both
                            pid, url = urls[side]
                            runs[n][side].append(measure(pid, url, side, clip, n, args.spread_s))
                problems = log_problems(log)
        finally:
            peer.terminate()
            try:
                peer.wait(20)
            except subprocess.TimeoutExpired:
                peer.kill()
        peer_log = [line for line in (tmp / "pipecat.log").read_text(errors="replace").splitlines() if line][
            -5:
        ]
    results = {}
    for n, sides in runs.items():
        ours, theirs = summarise(sides["ours"]), summarise(sides["pipecat"])
        for side in (ours, theirs):
            side["saturated"] = saturated(side, n * args.turns * args.rounds, args.silence_ms)
        results[str(n)] = {"ours": ours, "pipecat": theirs, **compare(ours, theirs)}
    return {
        "bench": "vs_pipecat",
        "pipecat": PIPECAT_VERSION,
        "results": results,
        "clip": {
            "sentence": text,
            "speech_s": round(len(speech) / 2 / caller.RATE, 2),
            "turns": args.turns,
            "seconds": round(clip.seconds, 1),
            "noise_dbfs": args.noise_dbfs,
        },
        "settings": {
            "silence_ms": args.silence_ms,
            "silero_threshold": 0.5,
            "rounds": args.rounds,
            "spread_s": args.spread_s,
            "turn_model": args.turn_model,
            "ours": "uvicorn, 1 process, instant_providers, VAD_PROVIDER=silero, browser socket "
            f"(JSON audio), TURN_MODEL={args.turn_model}",
            "pipecat": "uvicorn + FastAPI, 1 process, FastAPIWebsocketTransport, raw PCM16, Silero in the "
            "user aggregator, "
            + ("Smart Turn v3 (its default stop), " if args.turn_model == "smart-turn" else "")
            + ("" if args.turn_model == "smart-turn" else "SpeechTimeoutUserTurnStopStrategy, ")
            + ("RTVI off" if args.pipecat_no_rtvi else "RTVI on (Pipecat's default)"),
        },
        "server_log": problems[:5],
        "pipecat_log_tail": peer_log,
    }


def main() -> None:
    args = parse_args()
    if not shutil.which("espeak-ng"):
        sys.exit("espeak-ng is needed for the caller's clip")
    command = ".venv/bin/python bench/bench_vs_pipecat.py " + " ".join(sys.argv[1:])
    load, speed = os.getloadavg()[0], proc_cpu.python_speed()
    figures = run(args)
    figures.update(command=command, load_average_before=round(load, 2), machine_python_loop_ms=speed)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
