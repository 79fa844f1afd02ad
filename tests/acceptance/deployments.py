"""The service as a user deploys it, for the acceptance suite: ``scripts/run`` itself, or uvicorn
with two workers on Redis; and what its log says afterwards.

``scripts/run`` is started as the README says (``PORT``, ``HOST``, a ``DATABASE_URL`` and the
deployment's variables in the environment): it runs ``scripts/_setup.sh``, migrates and execs
daphne, so the suite serves exactly what a new user gets. The second deployment is the README's
scale-out shape: ``uvicorn voiceagent.asgi:application --workers 2`` sharing one PostgreSQL
database (a fresh copy of the migrated template, :mod:`postgres`) and one Redis database
(:data:`REDIS_DB`, one per pytest worker, flushed before and after; no other test uses it).

Both write stdout and stderr to one log file; :func:`incidents` cuts it into ERROR/CRITICAL lines
and tracebacks, which the modules compare with what they provoked on purpose.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import postgres
import pytest
import redis
from servers import ROOT, free_port, server_command, wait_http

from voiceagent.config import BY_NAME

RUN = "scripts/run"
UVICORN = "uvicorn-2-workers-redis"
KINDS = (RUN, UVICORN)
WORKERS = 2
# Redis databases: 0 test_redis, 3 test_relay_shutdown, 5 test_telephony_servers, 7 banking demo, 9
# test_two_hosts, 10 bench, 12 test_worker_kill; here one per pytest-xdist worker (up to four;
# scripts/test runs three and keeps the suite on one of them, but a plain ``-n`` run may spread
# it), as each deployment flushes its database
_WORKER_DBS = (11, 13, 14, 15)
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
REDIS_DB = _WORKER_DBS[_WORKER % len(_WORKER_DBS)]
# a scale-out deployment lent to several modules (conftest.DeploymentPool) keeps a database of its
# own: the modules between its users start and flush theirs on REDIS_DB
_SHARED_DBS = (4, 6, 8, 1)
SHARED_REDIS_DB = _SHARED_DBS[_WORKER % len(_SHARED_DBS)]
START_TIMEOUT_S = 240.0  # a first scripts/run on a fresh clone installs the runtime requirements

# The settings of the modules that share their deployments (conftest.DeploymentPool): each module's
# needs, merged (before, each module started its own pair with its own subset)
SHARED_CONTACTCENTER_KEY = "acceptance-contact-center-key-shared"
SHARED_TWILIO_ACCOUNT, SHARED_TWILIO_TOKEN = "AC" + "3" * 32, "acceptance-twilio-token"
SHARED_ENV = {
    "BROWSER_MAX_CONNECTIONS": "16",  # the browser module's 12 callers, dashboards and a bystander
    "BROWSER_MAX_MESSAGE_BYTES": "4096",  # small, so that some of the ws fuzz's messages exceed it
    "TELEPHONY_MAX_MESSAGE_BYTES": "8192",  # likewise for the provider fuzz's media frames
    # pools of 4 (the defaults) that make a caller wait at most 1 s for a free recogniser: whoever
    # waits longer is refused, which the phone module's crowd must never be
    "POOL_ACQUIRE_TIMEOUT": "1",
    "REPROMPT_AFTER_S": "0",  # the fuzzers' bystanders are silent for minutes: no re-prompts, no goodbye
    "CONTACTCENTER_API_KEY": SHARED_CONTACTCENTER_KEY,
    # Twilio's webhook and stream answer beside ACS (which places the outbound calls)
    "TWILIO_ACCOUNT_SID": SHARED_TWILIO_ACCOUNT,
    "TWILIO_AUTH_TOKEN": SHARED_TWILIO_TOKEN,
}

# Log lines of known findings that any module may cause until they are fixed; each must have its own
# strict-xfail test, so this list hides nothing for good. Empty: every finding so far is fixed.
# (The last one: the telephony client's aiohttp session was never closed at shutdown.)
KNOWN_LOG_FINDINGS: dict[str, str] = {}
_INHERITED_EXCLUDE = ("MCP_SERVER_", "DJANGO_", "PYTHONPATH")


def clean_environ() -> dict[str, str]:
    """This process's environment without any of the service's settings (a developer's exports, the
    test run's own): each deployment states every variable it depends on."""
    return {k: v for k, v in os.environ.items() if k not in BY_NAME and not k.startswith(_INHERITED_EXCLUDE)}


def flush_redis(db: int = REDIS_DB) -> None:
    redis.Redis(host="127.0.0.1", port=6379, db=db).flushdb()


@dataclass
class Deployment:
    kind: str
    port: int
    log: Path
    proc: subprocess.Popen
    api_key: str
    workers: int = 1
    ready_503s: int = 0  # /ready answers 503 seen while waiting for the start
    database: str | None = None  # a PostgreSQL database of its own, dropped when it stops
    host: str = "127.0.0.1"  # the address it listens on (another loopback address: another host)
    redis_db: int = REDIS_DB  # the scale-out shape's Redis database
    log_start: int = 0  # where the current module's part of the log begins (a lent deployment)
    later_users: int = 0  # modules of this run that will be lent it after the current one
    stopped: bool = field(default=False, init=False)

    @property
    def http(self) -> str:
        return f"http://{self.host}:{self.port}/api/v1"

    @property
    def ws(self) -> str:
        return f"ws://{self.host}:{self.port}/api/v1"

    @property
    def database_url(self) -> str:
        """Its ``DATABASE_URL``: PostgreSQL for the scale-out shape, SQLite beside its log for
        ``scripts/run``."""
        return self.database or f"sqlite:///{self.log.parent / 'db.sqlite3'}"

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    def log_text(self) -> str:
        """The log since the current module was lent the deployment (all of it when not shared)."""
        return self.log.read_text(errors="replace")[self.log_start :]

    def tail(self, chars: int = 6000) -> str:
        return f"----- {self.kind} log tail -----\n{self.log_text()[-chars:]}"

    def stop(self) -> bool:
        """SIGTERM and wait: the log then holds the shutdown too. True when it is stopped; a
        deployment that later modules of this run will be lent keeps running (False): the last of
        them stops it, and its log check covers the shutdown."""
        if self.later_users > 0:
            return False
        if self.stopped:
            return True
        self.stopped = True
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait(10)
        if self.kind == UVICORN:
            flush_redis(self.redis_db)
        if self.database:
            postgres.drop(self.database)
        return True

    def _signal(self, sig: int) -> None:
        if self.kind == RUN:  # scripts/run execs daphne in its own session: the group is ours
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)


def spawn_uvicorn(kind: str, port: int, log: Path, env: dict[str, str], api_key: str) -> Deployment:
    """uvicorn with ``WORKERS`` workers on ``port``, its output in ``log`` (not yet ready)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            server_command("uvicorn", port, workers=WORKERS),
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Deployment(kind, port, log, proc, api_key, workers=WORKERS)


def start(kind: str, root: Path, env: dict[str, str], api_key: str, redis_db: int = REDIS_DB) -> Deployment:
    """Start ``kind`` on a free port with ``env`` added to a clean environment; wait until ready
    (the scale-out shape on Redis database ``redis_db``)."""
    port = free_port()
    log = root / f"{kind.replace('/', '-')}.log"
    full = {
        **clean_environ(),
        "DATABASE_URL": f"sqlite:///{root / 'db.sqlite3'}",
        "API_KEYS": api_key,
        "PYTHONUNBUFFERED": "1",
        **env,
    }
    if kind == RUN:
        full.update(PORT=str(port), HOST="127.0.0.1")
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["bash", "scripts/run"],
                cwd=ROOT,
                env=full,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deployment = Deployment(kind, port, log, proc, api_key)
    elif kind == UVICORN:  # the README's production: PostgreSQL and Redis (a fresh database each)
        flush_redis(redis_db)
        database = postgres.fresh_database("acc")
        full.update(CACHE_HOST="127.0.0.1", CACHE_PORT="6379", CACHE_DB=str(redis_db), DATABASE_URL=database)
        deployment = spawn_uvicorn(kind, port, log, full, api_key)
        deployment.database, deployment.redis_db = database, redis_db
    else:
        raise ValueError(kind)
    try:
        wait_ready(deployment)
    except BaseException:
        deployment.stop()
        print(deployment.tail())
        raise
    return deployment


def wait_ready(deployment: Deployment) -> None:
    """Poll ``/ready`` as an orchestrator does, until every worker has answered 200: a few
    consecutive 200s on fresh connections (the kernel spreads them over the workers)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    url = f"{deployment.http}/ready"
    wait_http(f"{deployment.http}/health", timeout=START_TIMEOUT_S, status=200)  # accepting requests
    streak = 0
    while streak < 4 * deployment.workers:
        if deployment.proc.poll() is not None:
            raise RuntimeError(f"{deployment.kind} exited with {deployment.proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} not ready in {START_TIMEOUT_S:g} s")
        try:
            status = httpx.get(url, timeout=5).status_code
        except httpx.HTTPError:
            status = 0
        deployment.ready_503s += status == 503
        ok = status == 200
        streak = streak + 1 if ok else 0
        if not ok:
            time.sleep(0.1)


def xfail_on(request, deployment: Deployment, kind: str, reason: str) -> None:
    """Mark the running test strict-xfail when it runs on ``kind``: a finding of that server only."""
    if deployment.kind == kind:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


# --- the log ------------------------------------------------------------------------------------------
_LEVEL = re.compile(r"\b(ERROR|CRITICAL)\b")
_TRACEBACK = "Traceback (most recent call last)"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


def incidents(text: str) -> list[str]:
    """Every ERROR/CRITICAL line and every traceback, one string each: the log line (or
    ``Traceback``) joined with the traceback's exception line when it has one."""
    found: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        head = line if _LEVEL.search(line) or line.startswith("Exception ignored in") else None
        start_tb = i + 1 if head is not None else i
        if start_tb < len(lines) and lines[start_tb].startswith(_TRACEBACK):
            j, last = _traceback_end(lines, start_tb)
            found.append(f"{head or 'Traceback'} | {last}".strip())
            i = j + 1
            continue
        if head is not None:
            found.append(head)
        i += 1
    return found


def _traceback_end(lines: list[str], i: int) -> tuple[int, str]:
    """The index and text of the exception line ending the traceback at ``lines[i]`` (chained
    tracebacks included: the last exception is the one that escaped)."""
    while True:
        j = i + 1
        while j < len(lines) and (lines[j].startswith((" ", "\t")) or not lines[j].strip()):
            j += 1
        if j >= len(lines):
            return len(lines) - 1, ""
        k = j + 1
        while k < len(lines) and not lines[k].strip():
            k += 1
        if k < len(lines) and lines[k].startswith(_CHAINED):
            k += 1
            while k < len(lines) and not lines[k].strip():
                k += 1
            if k < len(lines) and lines[k].startswith(_TRACEBACK):
                i = k
                continue
        return j, lines[j]


def unexpected(text: str, allowed: dict[str, str]) -> list[str]:
    """The incidents no pattern of ``allowed`` (regex -> why it is there) explains."""
    return [incident for incident in incidents(text) if not any(re.search(p, incident) for p in allowed)]


def assert_log_clean(
    deployment: Deployment, provoked: dict[str, str] | None = None, stop: bool = True
) -> None:
    """No ERROR/CRITICAL line or traceback in the deployment's log other than the ``provoked`` ones
    (regex -> which test provoked it) and the known findings; with ``stop``, the shutdown included
    (a second after the last client left: an operator's SIGTERM, not one racing a hang-up)."""
    time.sleep(1.0)
    if stop:
        deployment.stop()
    left = unexpected(deployment.log_text(), {**KNOWN_LOG_FINDINGS, **(provoked or {})})
    assert not left, "the server logged errors no test provoked:\n" + "\n".join(left[:20])
