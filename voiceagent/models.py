"""Service-wide models: API keys (stored hashed, never retrievable)."""

from __future__ import annotations

import hashlib
import secrets

from django.db import models

KEY_PREFIX = "va_"


def hash_key(raw: str) -> str:
    """SHA-256 of a key: keys are 256-bit random tokens, so a fast hash is safe to store."""
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiKey(models.Model):
    """A client API key. Only the hash and a short display prefix are stored."""

    name = models.CharField(max_length=100, help_text="Who or what uses this key")
    prefix = models.CharField(max_length=16, editable=False, help_text="First characters, to recognise it")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def create_key(cls, name: str) -> tuple[ApiKey, str]:
        """Create a key; the raw value is returned once and never stored."""
        raw = KEY_PREFIX + secrets.token_urlsafe(32)
        obj = cls.objects.create(name=name, prefix=raw[:10], key_hash=hash_key(raw))
        return obj, raw
