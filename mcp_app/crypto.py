"""Encryption at rest for MCP secrets (tokens, header values, client secrets, stdio env).

Fernet (AES-128-CBC + HMAC-SHA256, from ``cryptography``). The key is ``MCP_ENCRYPTION_KEY``: a
Fernet key (32 url-safe base64 bytes) is used as is, any other string is stretched with
HKDF-SHA256. Without it, the key is derived from ``SECRET_KEY`` with HKDF-SHA256. Decryption
also tries the ``SECRET_KEY``-derived key, so setting ``MCP_ENCRYPTION_KEY`` later does not lose
what was stored before (the next save re-encrypts with the new key).

A value that cannot be decrypted (key changed) reads as empty and logs a warning naming the
column, never the value: the operator re-enters the secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.db import models

logger = logging.getLogger("mcp_app.crypto")

_SALT = b"voiceagent.mcp_app"
_INFO = b"mcp secrets at rest v1"
_cache: dict[tuple[str, str], MultiFernet] = {}


def _derive(material: str) -> bytes:
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=_INFO)
    return base64.urlsafe_b64encode(hkdf.derive(material.encode("utf-8")))


def _key_from(value: str) -> bytes:
    raw = value.strip().encode()
    try:
        if len(base64.urlsafe_b64decode(raw)) == 32:
            Fernet(raw)
            return raw
    except (binascii.Error, ValueError):
        pass
    return _derive(value)


def fernet() -> MultiFernet:
    """The current cipher (first key encrypts, every key decrypts)."""
    configured = settings.CONFIG.MCP_ENCRYPTION_KEY or ""
    secret = settings.SECRET_KEY
    cached = _cache.get((configured, secret))
    if cached is None:
        keys = [Fernet(_key_from(configured))] if configured else []
        keys.append(Fernet(_derive(secret)))
        cached = _cache[(configured, secret)] = MultiFernet(keys)
    return cached


def encrypt(value: str) -> str:
    if not value:
        return ""
    return fernet().encrypt(value.encode("utf-8")).decode("ascii")


def decrypt(value: str, what: str = "value") -> str:
    if not value:
        return ""
    try:
        return fernet().decrypt(value.encode("ascii")).decode("utf-8")
    except (InvalidToken, ValueError, UnicodeError):
        logger.warning(
            "could not decrypt the stored %s (encryption key changed?); treating it as empty", what
        )
        return ""


def hash_value(value: str) -> str:
    """One-way hash for lookups of high-entropy values (OAuth ``state``)."""
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


class EncryptedTextField(models.TextField):
    """A text column stored encrypted; the model attribute holds the plaintext."""

    def from_db_value(self, value, expression, connection):
        if value is None:
            return ""
        return decrypt(value, f"{self.model.__name__}.{self.name}")

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        return encrypt(value or "")

    def value_to_string(self, obj):  # serialization (dumpdata): never the plaintext
        return ""


class EncryptedJSONField(models.TextField):
    """A JSON object column stored encrypted; the attribute holds the decoded object."""

    def from_db_value(self, value, expression, connection):
        text = decrypt(value or "", f"{self.model.__name__}.{self.name}")
        return _loads(text)

    def to_python(self, value):
        if isinstance(value, str):
            return _loads(value)
        return value if value is not None else {}

    def get_prep_value(self, value):
        if not value:
            return ""
        return encrypt(json.dumps(value, sort_keys=True, separators=(",", ":")))

    def value_to_string(self, obj):  # serialization (dumpdata): never the plaintext
        return ""


def _loads(text: str) -> Any:
    if not text:
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return {}
