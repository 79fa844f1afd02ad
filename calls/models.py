"""The durable record of phone calls: every worker reads and writes call state here.

Callbacks for one call may reach any worker, so the status lives in the database, not in a
process; the hot connection-id -> session lookup for the media stream is :mod:`calls.callmap`.
"""

from __future__ import annotations

from django.db import models

DIRECTIONS = ("inbound", "outbound")
STATUSES = ("initiating", "ringing", "connected", "disconnected", "failed")
MODES = ("MEDIA", "TRANSCRIPTION", "VOICE_LIVE")
ENDED_STATUSES = ("disconnected", "failed")


class Call(models.Model):
    """One outbound or inbound phone call, keyed by the provider's call connection id."""

    connection_id = models.CharField(max_length=200, unique=True)
    direction = models.CharField(max_length=10, choices=[(d, d) for d in DIRECTIONS])
    phone_number = models.CharField(max_length=64, blank=True, default="")
    scenario = models.CharField(max_length=64, blank=True, default="")
    session_id = models.CharField(max_length=128, blank=True, default="", db_index=True)
    status = models.CharField(max_length=16, choices=[(s, s) for s in STATUSES], default="initiating")
    mode = models.CharField(max_length=16, choices=[(m, m) for m in MODES], default="MEDIA")
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    server_call_id = models.CharField(max_length=512, blank=True, default="")
    correlation_id = models.CharField(max_length=128, blank=True, default="")
    failure_reason = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "-created_at"], name="calls_status_created")]

    def __str__(self) -> str:
        return f"{self.direction} {self.phone_number or '?'} ({self.connection_id})"

    @property
    def duration_s(self) -> float | None:
        """Seconds between connect and disconnect; None until both are known."""
        if self.started_at is None or self.ended_at is None:
            return None
        return round(max((self.ended_at - self.started_at).total_seconds(), 0.0), 3)

    @property
    def ended(self) -> bool:
        return self.status in ENDED_STATUSES
