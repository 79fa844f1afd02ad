"""Two hosts behind nginx (README, "Scaling out"): the pieces that tests/faults/test_two_hosts.py
and ``bench_capacity --hosts 2`` share. A host is the README's production command bound to an
address of its own (127.0.0.2, 127.0.0.3: two machines on one loopback); nginx runs
``deploy/nginx.conf`` with only its addresses, ports and file paths replaced."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from pathlib import Path

from servers import PYTHON, ROOT

HOSTS = ("127.0.0.2", "127.0.0.3")
NGINX_CONF = ROOT / "deploy" / "nginx.conf"
_UPSTREAM = re.compile(r"^\s*server 10\.0\.0\.\d+:8000 .*;$", flags=re.M)


def nginx_binary() -> str:
    found = shutil.which("nginx") or "/usr/sbin/nginx"
    assert Path(found).exists(), "nginx is missing: scripts/test installs it (Debian package nginx)"
    return found


def nginx_conf(listen: int, upstreams: list[str], folder: Path) -> str:
    """deploy/nginx.conf with this run's addresses, ports and files; nothing else changes."""
    text = NGINX_CONF.read_text()
    servers = _UPSTREAM.findall(text)
    assert len(servers) == len(upstreams), servers
    for line, upstream in zip(servers, upstreams, strict=True):
        text = text.replace(line, re.sub(r"10\.0\.0\.\d+:8000", upstream, line))
    text = text.replace("listen 80;", f"listen 127.0.0.1:{listen};")
    text = text.replace("/var/log/nginx/voiceagent-access.log", str(folder / "access.log"))
    kinds = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    temp = "".join(f"    {kind}_temp_path {folder / kind};\n" for kind in kinds)
    return text.replace("http {\n", "http {\n" + temp, 1)


def host_command(ip: str, port: int, workers: int = 1) -> list[str]:
    """The README's production command on ``ip:port``."""
    command = [PYTHON, "-m", "uvicorn", "voiceagent.asgi:application", "--host", ip, "--port", str(port)]
    command += ["--proxy-headers", "--ws-per-message-deflate", "false", "--timeout-graceful-shutdown", "10"]
    return command + (["--workers", str(workers)] if workers > 1 else [])


def start_nginx(folder: Path, listen: int, upstreams: list[str]) -> subprocess.Popen:
    """nginx in the foreground with its configuration, pid and logs in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nginx.conf").write_text(nginx_conf(listen, upstreams, folder))
    settings = f"daemon off; pid {folder / 'nginx.pid'}; error_log {folder / 'error.log'} warn;"
    return subprocess.Popen(
        [nginx_binary(), "-p", str(folder), "-c", str(folder / "nginx.conf"), "-g", settings],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )


def stop_nginx(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGQUIT)  # graceful: open connections finish
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
