"""Start the real service under daphne or uvicorn in a subprocess, for lifecycle and bench runs."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def base_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("CACHE_", "DATABASE_", "MCP_", "APPCONFIG"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="voiceagent.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests" / "support")]),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


TEMPLATES = ROOT / "var" / "test-migrated"  # one migrated SQLite database per set of migrations


def migrations_key() -> str:
    """What a fresh migrated database depends on: every migration file (none runs code of its own,
    no app listens to ``post_migrate``), and the installed Django."""
    import django

    digest = hashlib.sha256(django.__version__.encode())
    for path in sorted(ROOT.glob("*/migrations/*.py")):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def migrate(env: dict[str, str]) -> None:
    """``manage.py migrate`` for ``env``'s database. A new SQLite file is a copy of a database
    migrated once per test run (and set of migrations): a migrate costs seconds of CPU, and the
    suite starts dozens of servers, each on a database of its own."""
    url = env.get("DATABASE_URL", "")
    target = Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None
    if target is None or target.exists():
        run_migrate(env)
        return
    TEMPLATES.mkdir(parents=True, exist_ok=True)
    template = TEMPLATES / f"{migrations_key()}.sqlite3"
    with open(TEMPLATES / ".lock", "w") as lock:  # pytest-xdist workers may want it at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not template.exists():
            scratch = template.with_suffix(f".{os.getpid()}.tmp")
            scratch.unlink(missing_ok=True)
            run_migrate({**env, "DATABASE_URL": f"sqlite:///{scratch}"})
            scratch.rename(template)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, target)


def run_migrate(env: dict[str, str]) -> None:
    subprocess.run([PYTHON, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=120)


def server_command(
    kind: str, port: int, workers: int = 1, access_log: bool = False, graceful_s: int | None = 10
) -> list[str]:
    """The command line of ``kind``; uvicorn's access log is off unless ``access_log`` (daphne's is
    always on, as ``scripts/run`` runs it). ``graceful_s=None`` drops uvicorn's shutdown bound, for
    tests that a shutdown ends by itself."""
    if kind == "uvicorn":
        cmd = [
            PYTHON,
            "-m",
            "uvicorn",
            "voiceagent.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--lifespan",
            "on",
        ]
        # as the README's production command: a connection handler that does not finish after the
        # close uvicorn sends at shutdown is cancelled after 10 s instead of holding the exit
        cmd += [] if graceful_s is None else ["--timeout-graceful-shutdown", str(graceful_s)]
        cmd += [] if access_log else ["--no-access-log"]
        return cmd + (["--workers", str(workers)] if workers > 1 else [])
    if kind == "daphne":
        return [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "voiceagent.asgi:application"]
    raise ValueError(kind)


def start(
    kind: str,
    port: int,
    env: dict[str, str],
    log_path: Path,
    workers: int = 1,
    access_log: bool = False,
    graceful_s: int | None = 10,
) -> subprocess.Popen:
    log = open(log_path, "wb")  # noqa: SIM115 - closed with the process by the caller's kill()
    return subprocess.Popen(
        server_command(kind, port, workers, access_log, graceful_s),
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def stop_all(procs: list[subprocess.Popen], logs: list[Path], within_s: float, tail: int = 3000) -> list[str]:
    """SIGTERM every process, wait ``within_s`` for each; kill those still running and return one
    line per such process with the tail of its log (empty when all stopped in time)."""
    for proc in procs:
        proc.terminate()
    slow = []
    for i, (proc, log) in enumerate(zip(procs, logs, strict=True)):
        try:
            proc.wait(within_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            slow.append(f"process {i} ({log.name}): {log.read_text()[-tail:]}")
    return slow


# seconds a server started by a test may take to answer: on a loaded two-core CI machine a
# uvicorn worker spent 15 s in imports and Piper 6 s loading its voice (the waits return at once
# when it answers, so a generous bound costs nothing)
SERVER_START_S = 60.0


def wait_http(url: str, timeout: float = 15.0, status: int | None = None) -> tuple[float, httpx.Response]:
    """Poll ``url`` until it answers (with ``status`` if given); return (seconds waited, response)."""
    began = time.monotonic()
    last_exc: Exception | None = None
    while time.monotonic() - began < timeout:
        try:
            response = httpx.get(url, timeout=2)
            if status is None or response.status_code == status:
                return time.monotonic() - began, response
        except httpx.HTTPError as exc:
            last_exc = exc
        time.sleep(0.05)
    raise TimeoutError(
        f"{url} did not answer{'' if status is None else f' {status}'} in {timeout} s: {last_exc}"
    )
