"""A burst of phone media streams against one server, and a bystander conversation that must not notice.

Issue 12 point 7: "A burst of 300 media-stream connections stalled a bystander conversation for
over 1 s." The real service runs under uvicorn, one worker, as tests/support/servers.py starts it,
with the default configuration (the offline providers: speech recognition and synthesis on this
machine, the rules dialog; SQLite; the local-memory cache), plus bench/plugins/loop_lag.py
recording its event loop's lag.

A bystander browser conversation (bench/burst_clients.py) types a turn every ``--interval`` s; after
``--idle-s`` s, ``--connections`` media streams open at once (from their own processes), each
starting a session: every stream that is admitted plays the agent's greeting, those past
``TELEPHONY_MAX_STREAMS`` (200 by default) must be refused at once with 1013. Streams stay
``--hold-s`` s after their answer, reading what the server sends (with ``--audio``, streaming 20 ms
silent frames in real time, as the provider does), then close.

Two handshakes, a server each: ``noauth`` (development, ``?scenario=default`` simulator streams:
the stream creates its session) and ``auth`` (the provider's: ``TELEPHONY_MEDIA_AUDIENCE`` set, a
bearer RS256 JWT checked against a local JWKS, and the call placed beforehand through
``POST /calls/initiate`` against the local ACS peer, so the stream finds its session in the call map).

Figures per handshake: the bystander's echo (its own words back: transport and loop only), reply
(first agent text: the engine's turn) and first-audio latencies, p50/p99/max, idle vs during the
burst; the server's loop lag (10 ms ticker) idle vs during the burst; accepted/refused counts with
close codes; time from the burst to the last stream answered; time to a refusal; the session rows
the burst left in the database (refused streams must leave none); server WARNING/ERROR lines.
``ok``: every stream answered, the refused ones with 1013 and no session, and the bystander's echo
and reply during the burst within 250 ms.

    .venv/bin/python bench/bench_connection_burst.py [--connections 300] [--handshakes noauth,auth]
        [--hold-s 10] [--audio] [--py-spy OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests" / "support")]
from bench_capacity import log_problems, ms, server  # noqa: E402
from burst_clients import Bystander, Stream, burst  # noqa: E402

AUDIENCE = "bench-acs-resource"
NOTICED_MS = 250  # a bystander's echo or reply later than this during the burst: it noticed
PLUGINS = f"{ROOT}:{ROOT / 'bench' / 'plugins'}:{ROOT / 'tests' / 'support'}"


def phase(values: list[tuple[float, float | None]], begin: float, end: float) -> list[float]:
    """The values stamped within [begin, end)."""
    return [v for t, v in values if begin <= t < end and v is not None]


def lag_figures(path: Path, windows: dict[str, tuple[float, float]]) -> dict:
    """p50/p99/max of the server's loop lag in each window (from bench/plugins/loop_lag.py)."""
    ticks: list[tuple[float, float]] = []
    for part in path.parent.glob(path.name + ".*"):
        ticks += [tuple(t) for t in json.loads(part.read_text())["ticks"]]
    return {name: ms(phase(ticks, *window), 50, 99) for name, window in windows.items()}


def bystander_figures(turns: list[dict], begin: float, end: float) -> dict:
    out: dict = {}
    for key in ("echo_ms", "reply_ms", "audio_ms"):
        values = phase([(t["at"], t[key]) for t in turns], begin, end)
        out[key] = ms(values, 50, 99)
    out["turns"] = sum(1 for t in turns if begin <= t["at"] < end)
    out["unanswered"] = sum(1 for t in turns if begin <= t["at"] < end and t["audio_ms"] is None)
    return out


def phone_sessions(db: Path) -> int:
    """Session rows of phone calls in the server's database."""
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT COUNT(*) FROM agents_app_session WHERE transport = 'phone'").fetchone()[0]


def place_calls(http_base: str, n: int) -> list[tuple[str, str]]:
    """``n`` calls placed through the REST API (the ACS peer answers); their (connection id, session)."""

    def place(_: int) -> tuple[str, str]:
        body = {"phone_number": "+15551234567", "scenario": "default"}
        response = httpx.post(f"{http_base}/calls/initiate", json=body, timeout=30)
        response.raise_for_status()
        placed = response.json()
        return placed["connection_id"], placed["session_id"]

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(place, range(n)))


def outcome_figures(outcomes: list[dict], start_at: float) -> dict:
    by = collections.Counter(o["outcome"] for o in outcomes)
    codes = collections.Counter(f"{o['code']} {o.get('reason', '')}".strip() for o in outcomes if "code" in o)
    accepted = [(o["answered"] - start_at) * 1000 for o in outcomes if o["outcome"] == "accepted"]
    refused = [(o["answered"] - start_at) * 1000 for o in outcomes if o["outcome"] == "refused"]
    after_open = [
        (o["answered"] - o["open"]) * 1000 for o in outcomes if o["outcome"] == "refused" and "open" in o
    ]
    answered = [o["answered"] for o in outcomes if "answered" in o]
    errors = collections.Counter(o["error"] for o in outcomes if "error" in o)
    return {
        "accepted": by["accepted"],
        "refused": by["refused"],
        "closed_by_server_after_accept": by["closed_by_server"],
        "failed": by["failed"],
        "close_codes": dict(codes),
        "time_to_answer_burst_s": round(max(answered) - start_at, 3) if answered else None,
        "accepted_after_ms": ms(accepted, 50, 99),
        "refused_after_ms": ms(refused, 50, 99),
        "refused_after_handshake_ms": ms(after_open, 50, 99),
        "client_errors": dict(errors.most_common(5)),
    }


async def drive(args, base: str, streams: list[Stream], spy_out: str | None, pid: int) -> dict:
    """The bystander's idle phase, the burst, and what both saw."""
    bystander = Bystander(f"{base}/api/v1/browser/conversation", interval=args.interval)
    ready = asyncio.Event()
    talk = asyncio.create_task(bystander.run(ready))
    await asyncio.wait_for(ready.wait(), 60)
    idle_from = time.monotonic()
    await asyncio.sleep(args.idle_s)
    start_at = time.monotonic() + 3.0  # the burst's processes start meanwhile
    spy = None
    if spy_out:
        spy_bin = str(Path(sys.executable).parent / "py-spy")  # pip install py-spy (not a requirement)
        argv = [spy_bin, "record", "--nonblocking", "--pid", str(pid), "--rate", "200", "--idle"]
        argv += ["--format", args.py_spy_format]  # speedscope keeps the samples in time order
        spy = subprocess.Popen([*argv, "-o", spy_out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    loop = asyncio.get_running_loop()
    outcomes = await loop.run_in_executor(
        None, burst, streams, start_at, args.hold_s, args.audio, args.client_processes
    )
    burst_end = time.monotonic()
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        await loop.run_in_executor(None, spy.wait, 60)
    bystander.stop()
    await asyncio.wait_for(talk, 60)
    return {
        "windows": {"idle": (idle_from, start_at), "burst": (start_at, burst_end)},
        "outcomes": outcomes,
        "start_at": start_at,
        "bystander": bystander,
    }


def run_handshake(args, handshake: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        lag_file = tmp / "lag.json"
        extra = {"LIFECYCLE_PLUGINS": "loop_lag", "LOOP_LAG_FILE": str(lag_file), "PYTHONPATH": PLUGINS}
        peer = issuer = None
        if handshake == "auth":
            from acs_peer import AcsPeer, telephony_env
            from jwks_issuer import JwksIssuer

            peer, issuer = AcsPeer().start(), JwksIssuer(AUDIENCE)
            extra.update(
                telephony_env(peer),
                TELEPHONY_MEDIA_AUDIENCE=AUDIENCE,
                TELEPHONY_MEDIA_JWKS_URL=issuer.url,
            )
        try:
            with server("uvicorn", tmp, **extra) as (base, proc, log):
                media = f"{base}/api/v1/media/stream?events=1"
                if handshake == "auth":
                    calls = place_calls(base.replace("ws://", "http://") + "/api/v1", args.connections)
                    streams = [
                        Stream(
                            media,
                            {"authorization": f"Bearer {issuer.token()}", "x-ms-call-connection-id": cid},
                        )
                        for cid, _ in calls
                    ]
                else:
                    streams = [Stream(f"{media}&scenario=default") for _ in range(args.connections)]
                sessions_before = phone_sessions(tmp / "db.sqlite3")
                offset = log.stat().st_size
                spy_out = f"{args.py_spy}.{handshake}.txt" if args.py_spy else None
                seen = asyncio.run(drive(args, base, streams, spy_out, proc.pid))
                sessions_after = phone_sessions(tmp / "db.sqlite3")
                problems = log_problems(log, offset)
            lags = lag_figures(lag_file, seen["windows"])
        finally:
            if peer is not None:
                peer.stop()
            if issuer is not None:
                issuer.close()
    bystander = seen["bystander"]
    figures = {"handshake": handshake, **outcome_figures(seen["outcomes"], seen["start_at"])}
    figures["phone_session_rows_made_by_burst"] = sessions_after - sessions_before
    windows = seen["windows"].items()
    figures["bystander"] = {name: bystander_figures(bystander.turns, *w) for name, w in windows}
    figures["bystander_errors"] = bystander.errors[:5]
    figures["server_loop_lag_ms"] = lags
    figures["server_log"] = problems[:8]
    during = figures["bystander"]["burst"]
    figures["ok"] = (
        not figures["failed"]
        and not figures["closed_by_server_after_accept"]
        and all(code.startswith("1013") for code in figures["close_codes"])
        and (handshake == "auth" or figures["phone_session_rows_made_by_burst"] == figures["accepted"])
        and not during["unanswered"]
        and all((during[k]["max"] or 0) <= NOTICED_MS for k in ("echo_ms", "reply_ms"))
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=300)
    parser.add_argument("--handshakes", default="noauth,auth", help="noauth, auth or both")
    parser.add_argument("--idle-s", type=float, default=10.0, help="the bystander alone first")
    parser.add_argument("--hold-s", type=float, default=10.0, help="streams stay this long once answered")
    parser.add_argument("--interval", type=float, default=0.25, help="the bystander's pause between turns")
    parser.add_argument("--audio", action="store_true", help="streams send 20 ms silent frames in real time")
    parser.add_argument("--client-processes", type=int, default=2, help="processes opening the burst")
    parser.add_argument(
        "--py-spy", metavar="OUT", help="profile the server in the burst: OUT.<handshake>.txt"
    )
    parser.add_argument("--py-spy-format", default="raw", choices=("raw", "speedscope"))
    args = parser.parse_args()
    load = os.getloadavg()[0]
    runs = [run_handshake(args, h.strip()) for h in args.handshakes.split(",") if h.strip()]
    print(
        json.dumps(
            {
                "bench": "connection_burst",
                "connections": args.connections,
                "hold_s": args.hold_s,
                "audio": args.audio,
                "runs": runs,
                "server": "uvicorn, 1 process, defaults: offline providers, SQLite, local-memory cache",
                "command": ".venv/bin/python bench/bench_connection_burst.py " + " ".join(sys.argv[1:]),
                "load_average_before": round(load, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
