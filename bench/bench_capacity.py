"""Capacity with the providers in the path: conversations through the real server, browser socket,
provider clients and speech pools (not the instant stubs of the other benchmarks).

``--mode embedded``: the embedded defaults (Whisper tiny.en STT in one recogniser process, Piper
TTS on threads, the offline rules dialog; ``STT_PROVIDER=pocketsphinx TTS_PROVIDER=espeak`` in the
environment measures the former ones) behind the real pools, in ONE server process (uvicorn or daphne, as
tests/support/servers.py starts it; uvicorn without per-message deflate, as the README's production
command runs it, unless ``--deflate``) with default settings, but for ``ENDPOINTING_MAX_MS`` = the VAD
silence: every turn ends after the same silence (the turn-taking rules' longer waits on an unsure
short phrase are deliberate, bench_turn_taking measures them). Callers speak espeak-ng sentences in
several voices and rates in real time (bench/capacity_caller.py). The number of concurrent
conversations ramps (``--steps``, one server for the whole ramp); a step HOLDS in real time when,
over its turns after each caller's first (steady state: a first turn may wait for a pool to grow
by a decoder process, reported apart): end of turn -> final transcript p95 <= 1000 ms, end of
turn -> first answer audio p95 <= 1500 ms; and over all turns: every turn got both, no refusal
("busy" error or close 1013), no other error message, no server WARNING/ERROR. The figure is
the largest step that holds, on this machine, with the load generator on it too. CPU per
component (cores: CPU seconds / wall seconds, from /proc, see bench/proc_cpu.py): the server's
event-loop thread, its other threads (Piper's syntheses), the Whisper recogniser or the
pocketsphinx decoder processes, the espeak-ng processes (reaped children), the callers.

``--mode cloud``: the chat model through the real ``openai`` client against the OpenAI-compatible
peer in its own process (bench/chat_peer.py: first token 300-600 ms, then a word every 20-50
ms) and cloud-like STT/TTS on the configured pools (bench/plugins/delayed_providers.py: final
transcript 100-300 ms after the end of audio, first audio 80-200 ms after the request), 200
conversations by default, ramping in over ``--ramp-s`` (10 s) and thinking 0.5-4 s between their
8 turns. Each provider reports its own delay per utterance, so the server-added latency of a turn =
(end of turn -> first audio at the caller) - (STT + chat first clause + TTS first chunk) of that
very turn. Targets, over the turns that ended while all the conversations were live (steady
state; the ramp's turns are reported apart): 0 refusals, p50 <= 5 ms, p99 <= 20 ms. Also what a
caller of the ramp waits before the agent speaks: ``connect_to_open_ms`` (the WebSocket handshake)
and ``start_to_greeting_audio_ms`` (``control start`` sent -> the greeting's first audio; the TTS
peer's 80-200 ms included). Also: that time
stage by stage (monotonic stamps from the server, the peer and the callers), the loop's lag, GC
pauses, CPU per process and ``/pools``; ``--workers N`` for N uvicorn workers, ``--py-spy OUT``;
``--recording``: every conversation recorded (``RECORDING_ENABLED``), the recorder's own figures
from ``/metrics`` printed (items dropped must stay 0; the targets: server CPU and p99 within +10 %
of a run without it).

Both modes also print what the figures depend on besides the code: ``server waiting for a core``
(seconds per second the server's threads were runnable with no core free, from schedstat: the
load generator and the server share this machine), ``callers_send_lag_ms`` (how late the callers
sent their frames) and ``machine_python_loop_ms`` (a fixed pure-Python loop, best of three: how fast
this machine is on the day; the same code's latency follows it).

Prints one JSON line per mode, with the command that reproduces it.

    .venv/bin/python bench/bench_capacity.py --mode embedded [--steps 1,4,8,12,16,24,32,40] [--turns 4]
    .venv/bin/python bench/bench_capacity.py --mode cloud [--conversations 200] [--turns 4] [--vad silero]
        [--hosts 2 | --database postgres]

``--vad`` picks the server's VAD (``VAD_PROVIDER``; webrtc unless the environment says otherwise).
In cloud mode the callers say a voiced two-tone sound (webrtcvad takes it for speech) unless
``--speech espeak`` (the default with Silero, which rightly hears no speech in it): espeak-ng
sentences, as in the embedded mode. ``--hosts 2`` (cloud): the service as README "Scaling out"
deploys it, two hosts behind nginx on PostgreSQL and Redis (bench/two_hosts_server.py); the server
cores then count both hosts and nginx.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path

import httpx
import numpy as np
import soxr

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests" / "support")]
import proc_cpu  # noqa: E402
from capacity_caller import FRAME_MS, RATE, Plan, Results, run_processes  # noqa: E402
from chat_peer import server_env, start_chat_peer  # noqa: E402
from harness import pct, server_problems, voice_frame  # noqa: E402
from servers import base_env, free_port, migrate, start, wait_http  # noqa: E402
from two_hosts_server import two_hosts  # noqa: E402

FINAL_P95_MS, AUDIO_P95_MS = 1000, 1500  # embedded: "holds in real time"
ADDED_P50_MS, ADDED_P99_MS = 5, 20  # cloud: server-added latency targets
SENTENCES = ("hello there", "how are you today", "what can you do", "tell me a joke", "what time is it")
VOICES = (("en-us", 175), ("en-us+f3", 160), ("en-gb", 190), ("en-us+m5", 150))


def espeak_utterances(tmp: Path) -> list[tuple[str, bytes]]:
    """The callers' lines: the sentences said by espeak-ng in several voices and rates."""
    return [
        (text, espeak_speech(text, *VOICES[(i // len(SENTENCES) + i) % len(VOICES)], tmp))
        for i, text in enumerate(SENTENCES * 2)
    ]


def espeak_speech(text: str, voice: str, wpm: int, tmp: Path) -> bytes:
    """``text`` said by espeak-ng, as 16 kHz PCM16 trimmed to its voiced part."""
    out = tmp / "say.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(out), text], check=True)
    with wave.open(str(out)) as w:
        pcm, rate = np.frombuffer(w.readframes(w.getnframes()), "<i2"), w.getframerate()
    pcm = soxr.resample(pcm, rate, RATE)
    n = RATE * FRAME_MS // 1000
    loud = [i for i in range(0, len(pcm) - n, n) if np.sqrt(np.mean(pcm[i : i + n].astype(float) ** 2)) > 300]
    return pcm[loud[0] : loud[-1] + n].astype("<i2").tobytes()


@contextlib.contextmanager
def server(
    kind: str, tmp: Path, deflate: bool = False, workers: int = 1, keep_log: str | None = None, **extra: str
):
    """The real service in a subprocess; yields (ws base url, process, log path). uvicorn runs as the
    README's production command does, without per-message deflate unless ``deflate``. ``keep_log``:
    the server logs at INFO and its log is copied there at the end (to look into a run)."""
    extra.setdefault("UVICORN_WS_PER_MESSAGE_DEFLATE", "true" if deflate else "false")
    env = base_env(tmp, LOG_LEVEL="INFO" if keep_log else "WARNING", **extra)
    migrate(env)
    port, log = free_port(), tmp / "server.log"
    proc = start(kind, port, env, log, workers=workers)
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v1/ready", timeout=90, status=200)
        yield f"ws://127.0.0.1:{port}", proc, log
    except BaseException:
        sys.stderr.write(log.read_text(errors="replace")[-3000:] if log.exists() else "")
        raise
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        if keep_log and log.exists():
            shutil.copyfile(log, keep_log)


def log_problems(log: Path, offset: int = 0) -> list[str]:
    """harness.server_problems with the time and session id taken out, so that one complaint made by
    many sessions counts as one line with its number."""
    counts: collections.Counter[str] = collections.Counter()
    for line in server_problems(log, offset):
        text, _, n = line.rpartition(" (x")
        text = re.sub(r"\[session_id=\w+\]|\d\d:\d\d:\d\d[.,]\d+ ", "", text).strip()
        counts[text] += int(n.rstrip(")") or 1)
    return [f"{text} (x{n})" for text, n in counts.most_common()]


def pools(ws_base: str) -> dict:
    """The server's own pool figures (``GET /api/v1/pools``): clients made, peak leased, refusals."""
    keys = ("clients", "peak_in_use", "created_total", "trimmed_total", "refused_total", "wait_ms_p95")
    try:
        body = httpx.get(ws_base.replace("ws://", "http://") + "/api/v1/pools", timeout=10).json()
    except (httpx.HTTPError, ValueError) as exc:
        return {"error": str(exc)[:80]}
    return {name: {k: m[k] for k in keys if k in m} for name, m in body.get("pools", {}).items()}


def turn_model_requests(ws_base: str) -> dict:
    """The end-of-turn model's requests by outcome (``GET /metrics``): how many pauses it scored, and
    how many the words judged alone because it was behind (shed, late, full)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = httpx.get(ws_base.replace("ws://", "http://") + "/metrics", timeout=10).text
    except httpx.HTTPError as exc:
        return {"error": str(exc)[:80]}
    return {
        sample.labels["outcome"]: int(sample.value)
        for family in text_string_to_metric_families(text)
        if family.name == "voiceagent_turn_model_requests"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


def ms(values: list[float], *ps: int) -> dict[str, float | None]:
    out: dict[str, float | None] = {f"p{p}": pct(values, p) for p in ps}
    out["max"] = round(max(values), 2) if values else None
    return out


def refusals(res: Results) -> dict[str, int]:
    return {k: n for k, n in res.errors.items() if "busy" in k or "1013" in k}


def measure(
    pid: int, plan: Plan, callers: int, processes: int, profile: str | None = None
) -> tuple[Results, dict[str, float], float]:
    """Run the callers; return their results, cores used per component, and the machine's busy cores.
    With ``profile``, py-spy samples the server meanwhile and writes collapsed stacks there."""
    spy = None
    if profile:
        argv = ["py-spy", "record", "--nonblocking", "--subprocesses", "--pid", str(pid), "--rate", "200"]
        argv += ["--format", "raw"]  # --subprocesses: uvicorn's workers are children of the pid
        spy = subprocess.Popen([*argv, "-o", profile], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    watch, me = proc_cpu.CpuWatch(pid), proc_cpu.threads(os.getpid())
    watch.start()
    waited = proc_cpu.waited(pid)
    t0 = time.monotonic()
    res = run_processes(plan, callers, processes)
    wall = time.monotonic() - t0
    waited = proc_cpu.waited(pid) - waited
    server, busy = watch.stop(wall)
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes its output when interrupted
        spy.wait(60)
    cores = {f"server {k}": v for k, v in server.items()}
    cores["callers"] = round(sum((proc_cpu.threads(os.getpid()) - me).values()) / wall, 3)
    cores["server waiting for a core"] = round(waited / wall, 3)  # runnable, no CPU free (schedstat)
    return res, cores, busy


UNANSWERED_KEYS = ("caller", "turn", "said", "heard", "final_ms", "audio_ms", "errors", "late_audio")


def embedded(args) -> dict:
    steps: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        utterances = espeak_utterances(tmp)
        silence = int(os.environ.get("VAD_SILENCE_TIMEOUT", "500"))
        # Every turn ends after the same silence: the turn-taking rules wait up to
        # ENDPOINTING_MAX_MS (1600) when Whisper is unsure of a short phrase ("hello there" ->
        # "Below here."), a deliberate wait that bench_turn_taking measures; counted here it would
        # read as recognition falling behind from the first caller on.
        # The same for the turn model, which ends a turn it hears complete before that silence
        # (TURN_MODEL=none here): the callers count an answer before their silence as an error.
        endpointing = os.environ.get("ENDPOINTING_MAX_MS", str(silence))
        turn_model = os.environ.get("TURN_MODEL", "none")
        fixed = {"ENDPOINTING_MAX_MS": endpointing, "TURN_MODEL": turn_model}
        with server(args.server, tmp, args.deflate, 1, args.server_log, **fixed) as (
            base,
            proc,
            log,
        ):
            for n in args.steps:
                plan = Plan(f"{base}/api/v1/browser/conversation", utterances, args.turns, silence)
                offset = log.stat().st_size
                res, cores, busy = measure(proc.pid, plan, n, args.client_processes)
                if args.turns_file:
                    with open(args.turns_file, "a") as f:
                        f.write(json.dumps({"conversations": n, "turns": res.turns}) + "\n")
                steady = [
                    t for t in res.turns if t["turn"] > 0
                ]  # the first turn may wait for the pools to grow
                final = [t["final_ms"] for t in steady if t["final_ms"] is not None]
                audio = [t["audio_ms"] for t in steady if t["audio_ms"] is not None]
                first = [t["audio_ms"] for t in res.turns if t["turn"] == 0 and t["audio_ms"] is not None]
                problems = log_problems(log, offset)
                unanswered = [t for t in res.turns if t["final_ms"] is None or t["audio_ms"] is None]
                missing = len(unanswered) + n * args.turns - len(res.turns)
                other = {k: v for k, v in res.errors.items() if k not in refusals(res)}
                holds = (
                    not missing
                    and not refusals(res)
                    and not other
                    and not problems
                    and pct(final, 95) <= FINAL_P95_MS
                    and pct(audio, 95) <= AUDIO_P95_MS
                )
                steps.append(
                    {
                        "conversations": n,
                        "turns": len(res.turns),
                        "final_transcript_ms": ms(final, 50, 95),
                        "first_audio_ms": ms(audio, 50, 95),
                        "first_turn_first_audio_ms": ms(first, 50, 95),
                        "turns_missing_transcript_or_audio": missing,
                        # which turns and what their caller saw (a turn never reached is
                        # counted above, its cause in the errors)
                        "unanswered_turns": [{k: t[k] for k in UNANSWERED_KEYS} for t in unanswered[:5]],
                        "refusals": refusals(res),
                        "other_errors": other,
                        "server_log": problems[:5],
                        "heard_something": round(
                            sum(1 for t in res.turns if t["heard"]) / max(1, len(res.turns)), 2
                        ),
                        "cpu_cores": cores,
                        "machine_busy_cores": busy,
                        "callers_send_lag_ms": ms(res.lag_ms, 50, 99),
                        "pools": pools(base),
                        "holds": holds,
                    }
                )
                if not holds and not args.keep_going:
                    break
    held = [s["conversations"] for s in steps if s["holds"]]
    return {
        "bench": "capacity",
        "mode": "embedded",
        "holds_in_real_time": max(held) if held else 0,
        "criterion": f"final transcript p95 <= {FINAL_P95_MS} ms, first audio p95 <= {AUDIO_P95_MS} ms, "
        "every turn answered, no refusal, no error, no server warning",
        "steps": steps,
        "server": f"{args.server}, 1 process, default settings but ENDPOINTING_MAX_MS={endpointing} "
        f"TURN_MODEL={turn_model} "
        "(every turn ends after the same silence): offline speech and rules dialog "
        "(Whisper tiny.en + Piper unless STT_PROVIDER/TTS_PROVIDER say otherwise)"
        + (", per-message deflate" if args.deflate else ""),
    }


def merge_delays(files) -> dict:
    """The delayed providers' records of every worker process, as one."""
    merged: dict = {"stt": {}, "tts": {}, "stamps": {}, "loop_lag_ms": [], "gc_ms": {}}
    for path in files:
        part = json.loads(Path(path).read_text())
        for key in ("stt", "tts", "stamps"):
            merged[key].update(part.get(key, {}))
        merged["loop_lag_ms"] += part.get("loop_lag_ms", [])
        for gen, pauses in part.get("gc_ms", {}).items():
            merged["gc_ms"].setdefault(gen, []).extend(pauses)
        merged.setdefault("gc_tracked_objects", part.get("gc_tracked_objects"))
    return merged


def cloud(args) -> dict:
    peer, peer_url = start_chat_peer(args.first_token_ms, args.peer_nice)
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            if args.speech == "espeak":  # Silero hears no speech in the two-tone frames
                voiced = [("", pcm) for _, pcm in espeak_utterances(tmp)]
            else:
                voiced = [("", voice_frame(RATE, FRAME_MS) * k) for k in (25, 32, 40, 47)]
            delays_file = tmp / "delays.json"
            extra = {
                **server_env(peer_url),
                "LIFECYCLE_PLUGINS": "delayed_providers",
                "BENCH_DELAYS_FILE": str(delays_file),
                "PYTHONPATH": f"{ROOT}:{ROOT / 'bench' / 'plugins'}:{ROOT / 'tests' / 'support'}",
            }
            if args.database == "postgres" and args.hosts == 1:  # the README's production database
                import postgres

                database = postgres.fresh_database("bench")
                atexit.register(postgres.drop, database)
                extra["DATABASE_URL"] = database
            if args.recording:  # every conversation recorded (issue 32): its cost on the server
                extra.update(RECORDING_ENABLED="true", RECORDING_DIR=str(tmp / "recordings"))
            silence = int(os.environ.get("VAD_SILENCE_TIMEOUT", "500"))
            if args.hosts == 2:  # README "Scaling out": two hosts behind nginx
                served = two_hosts(tmp, "INFO" if args.server_log else "WARNING", **extra)
            else:
                served = server(args.server, tmp, args.deflate, args.workers, args.server_log, **extra)
            with served as (base, proc, log):
                plan = Plan(
                    f"{base}/api/v1/browser/conversation",
                    voiced,
                    args.turns,
                    silence,
                    spread_s=args.ramp_s,
                    pause_s=(0.5, 4.0),
                )
                p0 = proc_cpu.process_tree(peer.pid)
                t0 = time.monotonic()
                res, cores, busy = measure(
                    proc if isinstance(proc, int) else proc.pid,
                    plan,
                    args.conversations,
                    args.client_processes,
                    args.py_spy,
                )
                cores["chat peer"] = round(
                    (proc_cpu.process_tree(peer.pid) - p0) / (time.monotonic() - t0), 3
                )
                llm = httpx.get(f"{peer_url}/bench/delays", timeout=10).json()
                pool_figures = pools(base)
                model_requests = turn_model_requests(base)
                recorded = recording_figures(base, tmp / "recordings") if args.recording else None
            problems = log_problems(log)
            delays = merge_delays(tmp.glob("delays.json.*"))
    finally:
        peer.terminate()
        peer.wait(10)
    figures = cloud_figures(args, res, cores, busy, problems, delays, llm)
    figures["pools"] = pool_figures  # with --hosts 2: the host nginx sent this request to
    figures["turn_model_requests"] = model_requests  # the same host's
    figures["hosts"] = args.hosts
    if recorded is not None:
        figures["recording"] = recorded
    return figures


def recording_figures(ws_base: str, folder: Path) -> dict:
    """What the recorder did, as ``/metrics`` counts it (items dropped must stay 0), and the bytes
    stored so far."""
    text = httpx.get(ws_base.replace("ws://", "http://") + "/metrics", timeout=10).text
    wanted = {
        "voiceagent_recording_dropped_total": "dropped",
        "voiceagent_recording_chunks_written_total": "chunks_written",
        "voiceagent_recording_queue_depth": "queue_depth",
    }
    out: dict = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in wanted:
            out[wanted[name]] = float(value)
    out["bytes_stored"] = sum(f.stat().st_size for f in folder.rglob("*.pcm")) if folder.exists() else 0
    return out


STAGES = (  # the server's own time in a turn, stage by stage: (name, from stamp, to stamp, provider delay)
    ("caller end of turn -> STT finish (transport, VAD)", "end_at", "stt_finish", None),
    ("STT wait beyond its delay (loop lag)", "stt_finish", "stt_final", "stt"),
    ("final transcript -> chat request (engine)", "stt_final", "chat_request", None),
    ("chat request -> sent (engine, openai client builds it)", "chat_request", "chat_send", None),
    ("sent -> peer application (HTTP, loopback)", "chat_send", "began", None),
    ("first text sent by peer -> in the engine (SSE, openai client)", "sent", "chat_first_text", None),
    ("first text -> TTS request (clause, speaker)", "chat_first_text", "tts_request", None),
    ("TTS wait beyond its delay (loop lag)", "tts_request", "tts_first_chunk", "tts"),
    ("first TTS chunk -> caller (engine, transport)", "tts_first_chunk", "audio_at", None),
)


def cloud_figures(args, res: Results, cores, busy, problems, delays: dict, llm: dict) -> dict:
    stt, tts, stamps = delays["stt"], delays["tts"], delays.get("stamps", {})
    if args.turns_file:
        Path(args.turns_file).write_text(
            json.dumps({"turns": res.turns, "greetings": res.greetings, "delays": delays, "chat": llm})
        )
    added, total, parts, unmatched = [], [], collections.defaultdict(list), 0
    ramp_added: list[float] = []  # turns that ended while callers were still connecting or leaving
    stages: dict[str, list[float]] = collections.defaultdict(list)
    span = res.all_live()
    for t in res.turns:
        key = (t["heard"] or "").removeprefix("utterance ").strip()
        if t["audio_ms"] is None or not all(key in d for d in (stt, llm, tts)):
            unmatched += 1
            continue
        delay = {"stt": stt[key], "chat": llm[key]["ms"], "tts": tts[key]}
        if span is None or not span[0] <= t["end_at"] <= span[1]:
            ramp_added.append(t["audio_ms"] - sum(delay.values()))
            continue
        for name, value in delay.items():
            parts[name].append(value)
        total.append(t["audio_ms"])
        added.append(t["audio_ms"] - sum(delay.values()))
        at = {**stamps.get(key, {}), **llm[key], **t}
        for name, begin, end, own in STAGES:
            if at.get(begin) is not None and at.get(end) is not None:
                stages[name].append((at[end] - at[begin]) * 1000 - (delay[own] if own else 0))
    p50, p99 = pct(added, 50), pct(added, 99)
    errors = [f"{k} (x{n})" for k, n in res.errors.items() if k not in refusals(res)] + problems
    return {
        "bench": "capacity",
        "mode": "cloud",
        "conversations": args.conversations,
        "turns": len(res.turns),
        "expected_turns": args.conversations * args.turns,
        "refusals": refusals(res),
        "steady_state": {
            "what": f"turns that ended while all {args.conversations} conversations were live (past the "
            f"{args.ramp_s:g} s ramp of connections and greetings, before the first caller left); the "
            "figures below, and the targets, are over these",
            "seconds": round(span[1] - span[0], 1) if span else 0,
            "turns": len(added),
        },
        "server_added_ms": ms(added, 50, 99),
        "ramp_turns_server_added_ms": {"turns": len(ramp_added), **ms(ramp_added, 50, 99)},
        "end_of_turn_to_first_audio_ms": ms(total, 50, 99),
        "connect_to_open_ms": ms([g["connect_ms"] for g in res.greetings], 50, 99),
        "start_to_greeting_audio_ms": ms([g["ms"] for g in res.greetings], 50, 99),
        "provider_delays_ms_p50": {k: pct(v, 50) for k, v in parts.items()},
        "turns_without_measure": unmatched,
        "server_added_by_stage_ms": {name: ms(v, 50, 99) for name, v in stages.items()},
        "server_loop_lag_ms": ms(delays.get("loop_lag_ms", []), 50, 99),
        "callers_send_lag_ms": ms(res.lag_ms, 50, 99),
        "server_gc_tracked_objects": delays.get("gc_tracked_objects"),
        "server_gc_pauses_ms": {
            gen: {"count": len(v), "total": round(sum(v)), **ms(v, 99)}
            for gen, v in delays.get("gc_ms", {}).items()
        },
        "errors": errors[:10],
        "cpu_cores": cores,
        "machine_busy_cores": busy,
        "targets": {"refusals": 0, "server_added_p50_ms": ADDED_P50_MS, "server_added_p99_ms": ADDED_P99_MS},
        "server": (
            f"two hosts ({args.server}, 1 process each) behind nginx, PostgreSQL and Redis"
            if args.hosts == 2
            else f"{args.server}, {args.workers} process(es)"
        )
        + (", per-message deflate" if args.deflate else "")
        + f"; openai client -> peer process (nice {args.peer_nice}); delayed STT/TTS on the configured pools",
        "ok": not refusals(res)
        and not errors
        and not unmatched
        and len(added) >= args.conversations
        and p50 is not None
        and p50 <= ADDED_P50_MS
        and p99 is not None
        and p99 <= ADDED_P99_MS,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("embedded", "cloud"), required=True)
    parser.add_argument("--server", choices=("uvicorn", "daphne"), default="uvicorn")
    parser.add_argument("--turns", type=int, help="turns per caller (default: embedded 4, cloud 8)")
    parser.add_argument(
        "--deflate",
        action="store_true",
        help="uvicorn: per-message deflate on (the README's command turns it off)",
    )
    parser.add_argument("--steps", default="1,4,8,12,16,24,32,40", help="embedded: concurrent conversations")
    parser.add_argument("--keep-going", action="store_true", help="embedded: ramp on after a step fails")
    parser.add_argument("--conversations", type=int, default=200, help="cloud")
    parser.add_argument("--workers", type=int, default=1, help="cloud: uvicorn worker processes")
    parser.add_argument(
        "--hosts",
        type=int,
        choices=(1, 2),
        default=1,
        help="cloud: 2 = two hosts behind nginx (PostgreSQL, Redis)",
    )
    parser.add_argument(
        "--database",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="cloud, one host: the server's database (postgres: a fresh one on TEST_POSTGRES_URL's server; "
        "with SQLite every database call of the process queues on one thread)",
    )
    parser.add_argument(
        "--ramp-s", type=float, default=10.0, help="cloud: callers connect spread over this many seconds"
    )
    parser.add_argument("--first-token-ms", default="300-600", help="cloud: the chat peer's first token")
    parser.add_argument("--peer-nice", type=int, default=0, help="cloud: niceness of the chat peer process")
    parser.add_argument("--recording", action="store_true", help="cloud: every conversation recorded")
    parser.add_argument("--client-processes", type=int, default=0, help="caller processes (0: 1 per 100)")
    parser.add_argument("--py-spy", metavar="OUT", help="cloud: profile the server with py-spy (on PATH)")
    parser.add_argument("--turns-file", help="write every turn's record (JSON) here, to look into a run")
    parser.add_argument("--server-log", help="the server logs at INFO; its log is copied here at the end")
    parser.add_argument(
        "--vad", choices=("webrtc", "silero"), help="the server's VAD_PROVIDER (default: the environment's)"
    )
    parser.add_argument(
        "--speech",
        choices=("tone", "espeak"),
        help="cloud: what callers say: a voiced two-tone sound (webrtcvad's speech) or espeak-ng "
        "sentences (default: espeak with Silero, which hears no speech in the tone; tone otherwise)",
    )
    args = parser.parse_args()
    if args.vad:
        os.environ["VAD_PROVIDER"] = args.vad  # the server's environment is built from ours
    vad = os.environ.get("VAD_PROVIDER", "webrtc")
    args.speech = args.speech or ("espeak" if vad == "silero" else "tone")
    args.steps = [int(s) for s in args.steps.split(",")]
    args.turns = args.turns or (4 if args.mode == "embedded" else 8)
    most = max(args.steps) if args.mode == "embedded" else args.conversations
    args.client_processes = args.client_processes or max(1, -(-most // 100))
    command = ".venv/bin/python bench/bench_capacity.py " + " ".join(sys.argv[1:])
    load, speed = os.getloadavg()[0], proc_cpu.python_speed()
    figures = embedded(args) if args.mode == "embedded" else cloud(args)
    figures.update(command=command, load_average_before=round(load, 2), machine_python_loop_ms=speed)
    figures["vad"] = vad
    if args.mode == "cloud":
        figures["caller_speech"] = args.speech
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
