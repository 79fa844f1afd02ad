"""``bench_capacity --mode cloud --hosts 2``: the service as README "Scaling out" deploys it - two
hosts (127.0.0.2, 127.0.0.3), each the production command, sharing PostgreSQL (a fresh database,
tests/support/postgres.py) and Redis, behind nginx running deploy/nginx.conf - for the callers to
reach through nginx. Both hosts and nginx run under one parent process so that the bench's CPU
watch (children of one pid) counts all three."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import postgres
import redis
from servers import base_env, free_port, wait_http
from two_hosts import HOSTS, host_command, nginx_binary, nginx_conf

REDIS_DB = 10  # not the suite's (0, 2, 3, 5, 7, 9, 11-15)


@contextlib.contextmanager
def two_hosts(tmp: Path, log_level: str = "WARNING", **extra: str) -> Iterator[tuple[str, int, Path]]:
    """Yields (ws base of nginx, the parent's pid, the hosts' log); everything stopped after."""
    database = postgres.fresh_database("bench")
    redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB).flushdb()
    env = base_env(
        tmp,
        LOG_LEVEL=log_level,
        DATABASE_URL=database,
        CACHE_HOST="127.0.0.1",
        CACHE_PORT="6379",
        CACHE_DB=str(REDIS_DB),
        **extra,
    )
    port, front = free_port(), free_port()
    folder = tmp / "nginx"
    folder.mkdir()
    (folder / "nginx.conf").write_text(nginx_conf(front, [f"{ip}:{port}" for ip in HOSTS], folder))
    nginx = [nginx_binary(), "-p", str(folder), "-c", str(folder / "nginx.conf")]
    nginx += ["-g", f"daemon off; pid {folder / 'nginx.pid'}; error_log {folder / 'error.log'} warn;"]
    script = " & ".join(shlex.join(c) for c in (*(host_command(ip, port) for ip in HOSTS), nginx))
    log = tmp / "hosts.log"
    with open(log, "wb") as out:  # one parent: `wait` until SIGTERM, which it passes on
        parent = subprocess.Popen(
            ["bash", "-c", f"trap 'kill -TERM $(jobs -p); wait' TERM; {script} & wait"],
            env=env,
            cwd=Path(__file__).resolve().parents[1],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        for ip in HOSTS:
            wait_http(f"http://{ip}:{port}/api/v1/ready", timeout=120, status=200)
        wait_http(f"http://127.0.0.1:{front}/api/v1/health", timeout=30, status=200)
        yield f"ws://127.0.0.1:{front}", parent.pid, log
    except BaseException:
        sys.stderr.write(log.read_text(errors="replace")[-3000:])
        raise
    finally:
        parent.send_signal(signal.SIGTERM)
        try:
            parent.wait(40)
        except subprocess.TimeoutExpired:
            os.killpg(parent.pid, signal.SIGKILL)
            parent.wait(10)
        redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB).flushdb()
        postgres.drop(database)
