"""Soak: 100 browser conversations in real time for 10 minutes on ONE uvicorn worker with Redis.

Issue 12 point 4: nothing dropped that followed the limits, memory flat. The service runs as
bench_capacity's cloud mode runs it (uvicorn, one process, no per-message deflate), on Redis
(``CACHE_HOST=127.0.0.1``, database ``--redis-db``: 13 by default, flushed before and after, that
database only; 0, 2, 5, 11 and 12 belong to the tests) and on the cloud-like providers of the
capacity benchmark, so that the service, not the offline models, is under test: the chat model
through the real ``openai`` client against bench/chat_peer.py (first token 300-600 ms, then a word
every 20-50 ms), delayed STT/TTS on the configured pools (bench/plugins/delayed_providers.py
through bench/plugins/soak_watch.py, which writes their records out every 10 s instead of keeping
them in the server).

``--conversations`` callers (bench/soak_callers.py over bench/capacity_caller.py) each hold a
conversation at a time: 20 ms frames of 16 kHz PCM16 in real time, a turn after a 0.5-3 s pause,
the answer heard to its end, ``--turns-per-conversation`` turns, then a new conversation, until
``--minutes`` have passed. Prints one JSON line: connections opened, closed by the client, closed
by the server (with codes: the target is none), never opened; the server's own connection counters;
turns, end of turn -> first audio and the server-added part of it (minus that turn's provider
delays) p50/p99; the server's RSS every 10 s and its slope (MB/min, least squares over the last
80 %); loop lag and GC pauses per 10 s window; errors; server WARNING/ERROR lines.

    .venv/bin/python bench/bench_soak.py [--minutes 10] [--conversations 100]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests" / "support")]
import soak_callers  # noqa: E402
from bench_capacity import STAGES, log_problems, ms, pools, server  # noqa: E402
from capacity_caller import FRAME_MS, RATE, Plan  # noqa: E402
from chat_peer import server_env, start_chat_peer  # noqa: E402
from harness import voice_frame  # noqa: E402

REDIS_DB = 13  # 0 test_redis, 2 multiprocess relay, 5 telephony servers, 11 acceptance, 12 faults
RSS_EVERY_S = 10.0
SLOPE_TARGET_MB_PER_MIN = 0.5
PLUGINS = f"{ROOT}:{ROOT / 'bench' / 'plugins'}:{ROOT / 'tests' / 'support'}"


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class RssWatch(threading.Thread):
    """The server's RSS every ``RSS_EVERY_S`` seconds, as (minutes since start, MB)."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.samples, self.stop = pid, [], threading.Event()
        self.began = time.monotonic()

    def run(self) -> None:
        while True:
            value = rss_mb(self.pid)
            if value is not None:
                self.samples.append((round((time.monotonic() - self.began) / 60, 3), round(value, 1)))
            if self.stop.wait(RSS_EVERY_S):
                return


def slope(samples: list[tuple[float, float]]) -> float | None:
    """MB per minute: least squares over the last 80 % of the samples (the first 20 % is warm-up)."""
    tail = samples[len(samples) // 5 :]
    if len(tail) < 3:
        return None
    result = statistics.linear_regression([t for t, _ in tail], [v for _, v in tail])
    return round(result.slope, 3)


def read_windows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def turn_figures(turns: list[dict], windows: list[dict], chat: dict) -> dict:
    """End of turn -> first audio, the server's part of it (minus the turn's provider delays), and
    that part stage by stage (bench_capacity's stages, from the server's and the peer's stamps)."""
    stt = {k: v for w in windows for k, v in w.get("stt", {}).items()}
    tts = {k: v for w in windows for k, v in w.get("tts", {}).items()}
    stamps: dict[str, dict] = {}
    for w in windows:
        for k, v in w.get("stamps", {}).items():
            stamps.setdefault(k, {}).update(v)
    total, added = [], []
    stages: dict[str, list[float]] = collections.defaultdict(list)
    for t in turns:
        if t["audio_ms"] is None:
            continue
        total.append(t["audio_ms"])
        key = (t["heard"] or "").removeprefix("utterance ").strip()
        if not (key in stt and key in tts and key in chat):
            continue
        delay = {"stt": stt[key], "tts": tts[key], "chat": chat[key]["ms"]}
        added.append(t["audio_ms"] - sum(delay.values()))
        at = {**stamps.get(key, {}), **chat[key], **t}
        for name, begin, end, own in STAGES:
            if at.get(begin) is not None and at.get(end) is not None:
                stages[name].append((at[end] - at[begin]) * 1000 - (delay[own] if own else 0))
    return {
        "turns": len(turns),
        "turns_answered": len(total),
        "end_of_turn_to_first_audio_ms": ms(total, 50, 99),
        "server_added_ms": ms(added, 50, 99),
        "server_added_by_stage_ms": {name: ms(v, 50, 99) for name, v in stages.items()},
        "turns_without_delays": len(total) - len(added),
    }


def window_figures(windows: list[dict]) -> dict:
    lag_p99 = [w["loop_lag_ms"]["p99"] for w in windows if w["loop_lag_ms"]["p99"] is not None]
    lag_max = [w["loop_lag_ms"]["max"] for w in windows if w["loop_lag_ms"]["max"] is not None]
    gc: dict[str, dict] = {}
    for w in windows:
        for gen, g in w.get("gc_ms", {}).items():
            into = gc.setdefault(gen, {"count": 0, "total": 0.0, "max": 0.0})
            into["count"] += g["count"]
            into["total"] = round(into["total"] + g["total"], 1)
            into["max"] = max(into["max"], g["max"])
    return {
        "loop_lag_ms": {
            "p99_median_window": round(statistics.median(lag_p99), 2) if lag_p99 else None,
            "p99_worst_window": max(lag_p99) if lag_p99 else None,
            "max": max(lag_max) if lag_max else None,
            "windows": len(windows),
        },
        "gc_pauses_ms": gc,
    }


def soak(args) -> dict:
    store = redis.Redis(host="127.0.0.1", port=6379, db=args.redis_db)
    store.flushdb()  # this benchmark's database only
    peer, peer_url = start_chat_peer(args.first_token_ms)
    voiced = [("", voice_frame(RATE, FRAME_MS) * k) for k in (25, 32, 40, 47)]
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            soak_file = tmp / "soak.jsonl"
            extra = {
                "CACHE_HOST": "127.0.0.1",
                "CACHE_PORT": "6379",
                "CACHE_DB": str(args.redis_db),
                **server_env(peer_url),
                "LIFECYCLE_PLUGINS": "soak_watch",
                "SOAK_FILE": str(soak_file),
                "PYTHONPATH": PLUGINS,
            }
            silence = int(os.environ.get("VAD_SILENCE_TIMEOUT", "500"))
            with server("uvicorn", tmp, **extra) as (base, proc, log):
                http = base.replace("ws://", "http://") + "/api/v1"
                plan = Plan(
                    f"{base}/api/v1/browser/conversation", voiced, args.turns_per_conversation, silence
                )
                watch = RssWatch(proc.pid)
                watch.start()
                began = time.monotonic()
                result = soak_callers.run(
                    plan,
                    args.conversations,
                    began + args.minutes * 60,
                    args.turns_per_conversation,
                    args.client_processes,
                )
                wall = time.monotonic() - began
                time.sleep(1.0)  # the server sees the last hang-ups
                watch.stop.set()
                watch.join()
                counters = httpx.get(f"{http}/health", timeout=10).json().get("session_metrics")
                chat = httpx.get(f"{peer_url}/bench/delays", timeout=30).json()
                pool_figures = pools(base)
            problems = log_problems(log)
            windows = read_windows(soak_file)
    finally:
        peer.terminate()
        peer.wait(10)
        store.flushdb()
        store.close()
    outcomes = result.outcomes
    server_closed = {k.removeprefix("server "): n for k, n in outcomes.items() if k.startswith("server ")}
    never = {k: n for k, n in outcomes.items() if k.startswith("connect failed")}
    opened = sum(outcomes.values()) - sum(never.values())
    errors = [
        f"{k} (x{n})"
        for k, n in result.results.errors.items()
        if not k.startswith(("closed", "connect failed"))
    ]
    rss = slope(watch.samples)
    figures = {
        "bench": "soak",
        "minutes": args.minutes,
        "wall_s": round(wall, 1),
        "conversations": args.conversations,
        "connections": {
            "opened": opened,
            "closed_by_client": outcomes["client closed"],
            "closed_by_server": server_closed,
            "never_opened": never,
        },
        "server_session_metrics": counters,
        **turn_figures(result.results.turns, windows, chat),
        "rss_mb": {
            "samples": [v for _, v in watch.samples],
            "every_s": RSS_EVERY_S,
            "slope_mb_per_min": rss,
            "first": watch.samples[0][1] if watch.samples else None,
            "last": watch.samples[-1][1] if watch.samples else None,
        },
        **window_figures(windows),
        "client_loop_lag_ms": ms(result.client_lag_ms, 50, 99),
        "pools": pool_figures,
        "errors": errors[:10],
        "server_log": problems[:10],
        "server": "uvicorn, 1 process, Redis db "
        f"{args.redis_db}; openai client -> delayed chat peer, delayed STT/TTS on the configured pools",
    }
    figures["ok"] = (
        not server_closed
        and not never
        and not errors
        and not problems
        and rss is not None
        and rss <= SLOPE_TARGET_MB_PER_MIN
    )
    figures["targets"] = {"closed_by_server": 0, "rss_slope_mb_per_min_at_most": SLOPE_TARGET_MB_PER_MIN}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--conversations", type=int, default=100)
    parser.add_argument("--turns-per-conversation", type=int, default=8, help="then the caller calls again")
    parser.add_argument(
        "--redis-db",
        type=int,
        default=REDIS_DB,
        help="flushed before and after: this one only (not 0, 2, 5, 11, 12: the tests')",
    )
    parser.add_argument("--first-token-ms", default="300-600", help="the chat peer's first token")
    parser.add_argument("--client-processes", type=int, default=2)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    figures = soak(args)
    figures.update(
        command=".venv/bin/python bench/bench_soak.py " + " ".join(sys.argv[1:]),
        load_average_before=round(load, 2),
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
