"""The cost of watching: the cloud capacity workload with metrics and tracing off, then on.

Runs ``bench_capacity.py --mode cloud`` (the real server, browser sockets, the openai client against
the chat peer, the cloud-like STT/TTS on the real pools) in alternating pairs: "off" with no
``OTEL_*`` exporter and ``METRICS_ENABLED=false``, "on" with ``METRICS_ENABLED=true`` and
``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at a local OTLP/HTTP sink in this process (it answers
every export with an empty ``ExportTraceServiceResponse`` and counts requests and bytes, so spans
really are batched, encoded and sent). Alternating pairs, not all offs then all ons, so that drift
of the shared machine falls on both sides.

Figures per side, the median over the pairs: the server's CPU (event-loop thread + its other
threads, cores), the turn latency p99 (caller's end of turn -> first audio of the answer, as the
caller measures it), and the server-added p99 (that latency minus the providers' own delays: the
most noise-sensitive figure, printed, not judged). Target (issue 15): CPU and turn latency p99
differ by at most 5 %.

    .venv/bin/python bench/bench_observability_cost.py [--pairs 2] [--conversations 200] [--turns 6]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class _Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver that accepts and counts (the receiver that decodes is tests/support's)."""

    received = {"requests": 0, "bytes": 0}

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        _Sink.received["requests"] += 1
        _Sink.received["bytes"] += length
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:  # quiet
        pass


def _run(args: argparse.Namespace, on: bool, endpoint: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["METRICS_ENABLED"] = "true" if on else "false"
    if on:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
        env["OTEL_SERVICE_NAME"] = "voiceagent-bench"
    argv = [
        sys.executable,
        str(ROOT / "bench" / "bench_capacity.py"),
        "--mode",
        "cloud",
        "--conversations",
        str(args.conversations),
        "--turns",
        str(args.turns),
    ]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(
            f"bench_capacity printed no figures (exit {done.returncode}):\n{done.stderr[-2000:]}"
        )
    figures = json.loads(lines[-1])
    cores = figures["cpu_cores"]
    return {
        "server_cpu_cores": round(cores["server event loop"] + cores["server threads"], 3),
        "turn_p99_ms": figures["end_of_turn_to_first_audio_ms"]["p99"],
        "server_added_p99_ms": figures["server_added_ms"]["p99"],
        "turns": figures["turns"],
        "errors": len(figures.get("errors") or []),
        "refusals": sum((figures.get("refusals") or {}).values()),
    }


def _median(runs: list[dict], key: str) -> float:
    return round(statistics.median(run[key] for run in runs), 3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--turns", type=int, default=6)
    args = parser.parse_args()
    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{sink.server_address[1]}"
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    for pair in range(args.pairs):
        for side in ("off", "on") if pair % 2 == 0 else ("on", "off"):
            runs[side].append(_run(args, side == "on", endpoint))
            print(f"pair {pair + 1} {side}: {runs[side][-1]}", file=sys.stderr)
    sink.shutdown()
    sides = {
        side: {key: _median(found, key) for key in ("server_cpu_cores", "turn_p99_ms", "server_added_p99_ms")}
        for side, found in runs.items()
    }
    cpu_change = sides["on"]["server_cpu_cores"] / sides["off"]["server_cpu_cores"] - 1
    p99_change = sides["on"]["turn_p99_ms"] / sides["off"]["turn_p99_ms"] - 1
    exported = _Sink.received["requests"] > 0
    clean = all(run["errors"] == 0 and run["refusals"] == 0 for found in runs.values() for run in found)
    print(
        json.dumps(
            {
                "bench": "observability_cost",
                "conversations": args.conversations,
                "turns_each": args.turns,
                "pairs": args.pairs,
                "off": sides["off"],
                "on": sides["on"],
                "cpu_change": round(cpu_change, 4),
                "turn_p99_change": round(p99_change, 4),
                "otlp_exports": dict(_Sink.received),
                "target": "CPU and turn latency p99 within 5 %",
                "runs": runs,
                "ok": clean and exported and abs(cpu_change) <= 0.05 and abs(p99_change) <= 0.05,
            }
        )
    )


if __name__ == "__main__":
    main()
