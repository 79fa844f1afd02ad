"""The answer begun in the caller's pause (``REPLY_HEAD_START``), as the caller hears it.

When the end-of-turn rule is not sure (the recogniser doubts the words, the turn model hears more
coming) it waits 0.5-1.6 s of silence; with the head start the model's first round and its first
clause's speech run inside that wait (voiceagent/conversation/head_start.py).

Two servers as ``scripts/run`` starts them (embedded Whisper tiny.en, Piper, the turn model), one
with the head start and one without, both on the same chat model:

- ``--llm cloud`` (default): the OpenAI-compatible peer with a cloud model's delays
  (bench/chat_peer.py: the first token 300-600 ms after the request, then a word every 20-50 ms),
  reached through the real ``openai`` client;
- ``--llm rules``: the offline rules dialog (instant; only the synthesis can be saved).

bench_voice_latency's callers (voices the service does not speak with, lines said over the browser
socket and through a telephone line on the phone media stream, in real time) alternate between the
two servers one conversation at a time, the same clips to both, so that both see the machine as it
is at that moment. Per turn: the end of the caller's speech (the last frame with speech energy) ->
the agent's first audio on the wire.

Prints one JSON line: per setting the p50/p95 (by wire too), the paired difference (the same clip
said to both servers; the recogniser hears it alike, so the rule waits alike), the WER, and the
head starts the server began, used and dropped (its ``/metrics``).

    .venv/bin/python bench/bench_head_start.py [--llm cloud|rules] [--conversations 8] [--lines 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests" / "support")]
from bench_voice_latency import job, run_phase, settle, summarise  # noqa: E402
from caller_clips import caller_clips  # noqa: E402
from chat_peer import server_env, start_chat_peer  # noqa: E402
from harness import pct, server_problems  # noqa: E402
from proc_cpu import cpu_isa, python_speed  # noqa: E402
from servers import base_env, free_port, migrate, start, wait_http  # noqa: E402

SETTINGS = ("on", "off")
_COUNT = re.compile(r'^voiceagent_head_starts_total\{outcome="(\w+)"\} ([0-9.e+]+)$', re.M)


def head_starts(port: int) -> dict[str, int]:
    """The server's head starts by outcome (begun, used, dropped), from its Prometheus figures."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {outcome: int(float(value)) for outcome, value in _COUNT.findall(text)}


def paired(turns: dict[str, list]) -> dict:
    """The same clip said to both servers: off - on per (conversation, line), ms."""
    on = {(t.conversation, t.line): t.latency_ms for t in turns["on"] if t.latency_ms is not None}
    diffs = [
        t.latency_ms - on[(t.conversation, t.line)]
        for t in turns["off"]
        if t.latency_ms is not None and (t.conversation, t.line) in on
    ]
    return {
        "pairs": len(diffs),
        "saved_p50_ms": pct(diffs, 50),
        "saved_mean_ms": round(statistics.fmean(diffs), 1) if diffs else None,
        "saved_over_300ms": sum(d > 300 for d in diffs),
        "worse_over_300ms": sum(d < -300 for d in diffs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm", choices=("cloud", "rules"), default="cloud")
    parser.add_argument("--first-token-ms", default="300-600", help="the cloud peer's delay (ms)")
    parser.add_argument("--conversations", type=int, default=8, help="to each server, one at a time")
    parser.add_argument("--lines", type=int, default=5)
    parser.add_argument("--answer-timeout", type=float, default=8.0)
    parser.add_argument("--seed", type=int, default=30)
    args = parser.parse_args()
    voices, clips = caller_clips(args.lines, args.seed)
    peer, llm_env = None, {}
    if args.llm == "cloud":
        peer, url = start_chat_peer(args.first_token_ms)
        llm_env = server_env(url)
    ports, servers, logs = {}, {}, {}
    try:
        for setting in SETTINGS:
            tmp = Path(tempfile.mkdtemp(prefix=f"bench-head-start-{setting}-"))
            env = base_env(tmp, REPLY_HEAD_START="true" if setting == "on" else "false", **llm_env)
            env.pop("LIFECYCLE_PLUGINS", None)
            migrate(env)
            ports[setting], logs[setting] = free_port(), tmp / "server.log"
            servers[setting] = start("daphne", ports[setting], env, logs[setting])
        for setting in SETTINGS:
            wait_http(f"http://127.0.0.1:{ports[setting]}/api/v1/ready", timeout=180, status=200)
        speed = python_speed()
        turns: dict[str, list] = {setting: [] for setting in SETTINGS}
        for i in range(args.conversations):
            for setting in SETTINGS if i % 2 == 0 else SETTINGS[::-1]:
                base = f"ws://127.0.0.1:{ports[setting]}"
                said = run_phase(base, clips, [job(i, voices)], False, args.answer_timeout)
                turns[setting] += asyncio.run(said)
        for setting in SETTINGS:
            settle(ports[setting])
        counts = head_starts(ports["on"])
    finally:
        for server in servers.values():
            server.terminate()
        for server in servers.values():
            try:
                server.wait(15)
            except Exception:
                server.kill()
        if peer is not None:
            peer.terminate()
    figures = {
        "bench": "head_start",
        "llm": "offline rules" if args.llm == "rules" else f"cloud peer, first token {args.first_token_ms}",
        **{f"head_start_{s}": summarise(turns[s]) for s in SETTINGS},
        "paired": paired(turns),
        "head_starts": counts,
        "voices": [v.label for v in voices],
        "server_problems": [p for s in SETTINGS for p in server_problems(logs[s])],
        "machine_python_loop_ms": speed,
        "machine_cpu_isa": cpu_isa(),
        "command": " ".join(["bench/bench_head_start.py", *sys.argv[1:]]),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
