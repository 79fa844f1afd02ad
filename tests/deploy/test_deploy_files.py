"""deploy/ says what the README says: the same production command (systemd, the image, compose), the
same settings (deploy/env.example is the README's export line, and passes ``check --deploy``), and
compose's nginx is deploy/nginx.conf with only its upstream changed. Images are not built in CI:
tests/faults/test_two_hosts.py runs nginx.conf itself in front of two hosts."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from voiceagent.config import BY_NAME

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
README = (ROOT / "README.md").read_text()


def production_block() -> str:
    section = README.split("\n## Production\n", 1)[1]
    return section.split("```bash\n", 1)[1].split("```", 1)[0]


def readme_command() -> list[str]:
    """The uvicorn command of README's "Production" block (continuation lines joined)."""
    lines = production_block().replace("\\\n", " ").splitlines()
    (line,) = [ln for ln in lines if ln.startswith(".venv/bin/uvicorn")]
    return shlex.split(line.split("#", 1)[0])


def readme_settings() -> set[str]:
    """The names the README's ``export`` line sets (its values are placeholders like ``<pw>``)."""
    text = production_block().replace("\\\n", " ")
    (line,) = [ln for ln in text.splitlines() if ln.startswith("export ")]
    return set(re.findall(r"(?:^|\s)([A-Z_]+)=", line.removeprefix("export ")))


def env_example() -> dict[str, str]:
    pairs = {}
    for line in (DEPLOY / "env.example").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = line.split("=", 1)
            pairs[key] = value
    return pairs


def args_after(command: list[str], program: str) -> list[str]:
    return command[next(i for i, part in enumerate(command) if part.endswith(program)) + 1 :]


def test_every_deployment_runs_the_readmes_production_command():
    want = args_after(readme_command(), "uvicorn")
    assert want[:1] == ["voiceagent.asgi:application"] and "--proxy-headers" in want

    unit = (DEPLOY / "voiceagent.service").read_text()
    (exec_start,) = re.findall(r"^ExecStart=(.*)$", unit, flags=re.M)
    assert args_after(shlex.split(exec_start), "uvicorn") == want

    image = (DEPLOY / "Containerfile").read_text()
    (cmd,) = re.findall(r"^CMD (\[.*\])$", image, flags=re.M)
    assert args_after(json.loads(cmd), "uvicorn") == want

    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert args_after(compose["services"]["voiceagent"]["command"], "uvicorn") == want
    assert compose["services"]["migrate"]["command"][-3:] == ["manage.py", "migrate", "--noinput"]
    assert "manage.py migrate" in production_block()
    assert {"db", "redis", "migrate", "voiceagent", "nginx"} <= set(compose["services"])


def test_the_settings_are_the_readmes_and_pass_the_deploy_check():
    example = env_example()
    assert set(example) == readme_settings()
    assert set(example) <= set(BY_NAME), set(example) - set(BY_NAME)
    unit = (DEPLOY / "voiceagent.service").read_text()
    assert "EnvironmentFile=/etc/voiceagent/env" in unit
    assert "env_file: .env" in (DEPLOY / "compose.yaml").read_text()

    env = {k: v for k, v in os.environ.items() if k not in BY_NAME and not k.startswith("DJANGO_")}
    env.update(example)
    check = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_composes_nginx_is_the_tested_nginx_conf_with_its_own_upstream():
    def body(name: str) -> list[str]:
        lines = (DEPLOY / name).read_text().splitlines()
        return [ln for ln in lines if not ln.startswith("#") and not re.match(r"\s*server \S+:8000 ", ln)]

    assert body("nginx.conf") == body("nginx-compose.conf")
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert "./nginx-compose.conf:/etc/nginx/nginx.conf:ro" in compose["services"]["nginx"]["volumes"]
    # the access log never holds a query string: API keys ride in ?api_key= on WebSockets
    conf = (DEPLOY / "nginx.conf").read_text()
    log_format = conf.split("log_format", 1)[1].split(";", 1)[0]
    assert "$request_uri" not in log_format and "$args" not in log_format and "$request " not in log_format


def test_the_readme_points_at_deploy():
    scaling = README.split("### Scaling out", 1)[1].split("\n## ", 1)[0]
    for name in (
        "deploy/nginx.conf",
        "deploy/voiceagent.service",
        "deploy/compose.yaml",
        "deploy/Containerfile",
    ):
        assert name in scaling, name
