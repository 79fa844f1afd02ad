"""manage.py purge_recordings: recordings older than the retention go (the manifest's start, or
the files' age without one), newer ones stay, --dry-run only says what would go."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command


@pytest.fixture
def recordings(settings, tmp_path):
    settings.STORAGES = {
        **settings.STORAGES,
        "recordings": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "rec", "allow_overwrite": True},
        },
    }
    return tmp_path / "rec"


def part(root, session_id: str, rid: str, started: datetime | None, chunk_bytes: int = 100):
    folder = root / session_id / rid
    folder.mkdir(parents=True)
    (folder / "000000.pcm").write_bytes(bytes(chunk_bytes))
    if started is not None:
        (folder / "manifest.json").write_text(json.dumps({"started_at": started.isoformat()}))
    return folder


def purge(*args: str) -> str:
    out = StringIO()
    call_command("purge_recordings", *args, stdout=out)
    return out.getvalue()


def test_old_recordings_go_and_new_ones_stay(recordings):
    now = datetime.now(UTC)
    old = part(recordings, "old-call", "20260101T000000Z-aaaa", now - timedelta(days=40))
    mixed_old = part(recordings, "mixed", "20260101T000000Z-bbbb", now - timedelta(days=31))
    mixed_new = part(recordings, "mixed", "20261127T000000Z-cccc", now - timedelta(days=1))
    torn = part(recordings, "crashed", "20260101T000000Z-dddd", None, 50)  # no manifest: the files' age
    stamp = time.time() - 40 * 86400
    os.utime(torn / "000000.pcm", (stamp, stamp))

    size = sum(f.stat().st_size for folder in (old, mixed_old, torn) for f in folder.iterdir())
    dry = purge("--older-than", "30", "--dry-run")
    assert f"would remove 3 recording(s), {size} bytes" in dry and "old-call/20260101T000000Z-aaaa" in dry
    assert old.exists() and mixed_old.exists() and torn.exists()

    out = purge("--older-than", "30")
    assert f"removed 3 recording(s), {size} bytes" in out
    assert not old.exists() and not mixed_old.exists() and not torn.exists()
    assert not (recordings / "old-call").exists()  # no empty folder left behind
    assert mixed_new.exists() and (mixed_new / "000000.pcm").exists()
    assert "removed 0 recording(s), 0 bytes" in purge("--older-than", "30")


def test_zero_days_removes_everything_and_no_folder_is_fine(recordings):
    assert "removed 0 recording(s)" in purge("--older-than", "0")  # no recordings folder yet
    folder = part(recordings, "a", "20261128T000000Z-aaaa", datetime.now(UTC) - timedelta(seconds=5))
    size = sum(f.stat().st_size for f in folder.iterdir())
    assert f"removed 1 recording(s), {size} bytes" in purge("--older-than", "0")
    assert not (recordings / "a").exists()


@pytest.mark.parametrize("value", ["-1", "soon"])
def test_a_bad_age_is_refused(recordings, value):
    with pytest.raises(CommandError, match="days"):
        call_command("purge_recordings", "--older-than", value)
    with pytest.raises(CommandError):
        call_command("purge_recordings")
