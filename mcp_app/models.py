"""MCP servers and pending OAuth flows.

:class:`McpServer` is the shared record every worker reads: servers added at runtime (``source =
runtime``) live only here; servers from ``MCP_ENABLED_SERVERS`` (``source = environment``) are
written here at startup so the admin and the name-uniqueness rule see them. Secrets (bearer
token, header values, stdio environment, OAuth client secret and tokens) are encrypted
(:mod:`mcp_app.crypto`). ``status``/``error``/``tool_names`` are the last state a worker observed;
each worker's live state is in its :class:`mcp_app.manager.McpManager`.

:class:`OAuthState` is one pending authorization-code flow: the ``state`` value is stored hashed,
the PKCE ``code_verifier`` encrypted; single use, valid for :data:`OAUTH_STATE_TTL` seconds.
"""

from __future__ import annotations

import datetime as dt

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from mcp_app.crypto import EncryptedJSONField, EncryptedTextField

NAME_PATTERN = r"^[a-z0-9_-]{1,64}$"
OAUTH_STATE_TTL = 600  # seconds: a pending flow expires after 10 minutes

TRANSPORT_CHOICES = [("streamable-http", "streamable HTTP"), ("sse", "SSE"), ("stdio", "stdio")]
SOURCE_CHOICES = [("environment", "environment (MCP_ENABLED_SERVERS)"), ("runtime", "runtime (API/admin)")]
STATUS_CHOICES = [("healthy", "healthy"), ("unhealthy", "unhealthy"), ("unknown", "unknown")]


class McpServer(models.Model):
    name = models.CharField(
        max_length=64,
        unique=True,
        validators=[RegexValidator(NAME_PATTERN, "lowercase letters, digits, hyphens, underscores (1-64)")],
    )
    url = models.CharField(max_length=2048, blank=True, default="", help_text="HTTP endpoint (not for stdio)")
    transport = models.CharField(
        max_length=20,
        choices=TRANSPORT_CHOICES,
        blank=True,
        default="streamable-http",
        help_text="blank: detect (streamable HTTP, then SSE)",
    )
    timeout = models.FloatField(
        default=30.0,
        validators=[MinValueValidator(1.0), MaxValueValidator(300.0)],
        help_text="seconds to connect, and per request",
    )
    headers = EncryptedJSONField(blank=True, default=dict, help_text="custom HTTP headers (encrypted)")
    auth_token = EncryptedTextField(blank=True, default="", help_text="bearer token (encrypted)")
    command = models.CharField(max_length=512, blank=True, default="", help_text="stdio: executable")
    args = models.JSONField(blank=True, default=list, help_text="stdio: arguments")
    env = EncryptedJSONField(blank=True, default=dict, help_text="stdio: environment (encrypted)")

    oauth_client_id = models.CharField(max_length=512, blank=True, default="")
    oauth_auth_url = models.CharField(max_length=2048, blank=True, default="")
    oauth_token_url = models.CharField(max_length=2048, blank=True, default="")
    oauth_scope = models.CharField(max_length=1024, blank=True, default="")
    oauth_redirect_uri = models.CharField(max_length=2048, blank=True, default="")
    oauth_client_secret = EncryptedTextField(blank=True, default="")
    access_token = EncryptedTextField(blank=True, default="")
    refresh_token = EncryptedTextField(blank=True, default="")
    token_expires_at = models.DateTimeField(null=True, blank=True)

    source = models.CharField(max_length=20, choices=SOURCE_CHOICES, default="runtime")
    status = models.CharField(max_length=20, choices=STATUS_CHOICES, default="unknown")
    error = models.TextField(blank=True, default="")
    tool_names = models.JSONField(blank=True, default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_connected_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("name",)
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.name

    @property
    def oauth_configured(self) -> bool:
        return bool(self.oauth_client_id and self.oauth_token_url)

    @property
    def has_auth(self) -> bool:
        headers = self.headers or {}
        return bool(
            self.auth_token or self.oauth_configured or any(k.lower() == "authorization" for k in headers)
        )


class OAuthState(models.Model):
    state_hash = models.CharField(max_length=64, unique=True)
    server_name = models.CharField(max_length=64)
    url = models.CharField(max_length=2048)
    transport = models.CharField(max_length=20, blank=True, default="")
    timeout = models.FloatField(default=30.0)
    client_id = models.CharField(max_length=512)
    auth_url = models.CharField(max_length=2048)
    token_url = models.CharField(max_length=2048)
    scope = models.CharField(max_length=1024, blank=True, default="")
    redirect_uri = models.CharField(max_length=2048)
    client_secret = EncryptedTextField(blank=True, default="")
    code_verifier = EncryptedTextField()
    created_at = models.DateTimeField(default=timezone.now)
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "pending OAuth flow"

    def __str__(self) -> str:
        return f"OAuth flow for {self.server_name}"

    @property
    def expires_at(self) -> dt.datetime:
        return self.created_at + dt.timedelta(seconds=OAUTH_STATE_TTL)

    @property
    def expired(self) -> bool:
        return timezone.now() >= self.expires_at
