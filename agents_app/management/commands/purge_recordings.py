"""``manage.py purge_recordings --older-than DAYS [--dry-run]``: the recordings' retention.

Recordings are kept until removed (they may be evidence, or personal data under a retention
rule); run this from cron or a scheduled job with the retention your policy sets. It works on any
storage behind ``STORAGES['recordings']``; the database is not touched.
"""

from __future__ import annotations

import argparse
from datetime import timedelta

from voiceagent.management.base import ProjectCommand
from voiceagent.recording import store


def days(raw: str) -> float:
    """A number of days, 0 or more (0: everything)."""
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number of days") from None
    if not 0 <= value <= 36500:
        raise argparse.ArgumentTypeError("the number of days must be from 0 to 36500")
    return value


class Command(ProjectCommand):
    help = "Remove the call recordings started more than DAYS days ago (print what, and how many bytes)."
    needs_database = False

    def add_arguments(self, parser):
        parser.add_argument("--older-than", type=days, required=True, metavar="DAYS", help="age in days")
        parser.add_argument("--dry-run", action="store_true", help="print what would go; remove nothing")

    def handle(self, *args, older_than: float, dry_run: bool, **options):
        removed = store.purge(timedelta(days=older_than), dry_run=dry_run)
        verb = "would remove" if dry_run else "removed"
        for part, size in removed:
            self.stdout.write(f"{verb} {part} ({size} bytes)")
        total = sum(size for _, size in removed)
        self.stdout.write(self.style.SUCCESS(f"{verb} {len(removed)} recording(s), {total} bytes"))
