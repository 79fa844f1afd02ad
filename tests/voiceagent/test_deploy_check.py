"""`manage.py check --deploy` is clean in production with the documented settings."""

import secrets
import subprocess
import sys

from servers import ROOT


def test_check_deploy_has_no_warnings(tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        "ENVIRONMENT": "production",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "voice.example.com",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
    }
    proc = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no issues" in proc.stdout
