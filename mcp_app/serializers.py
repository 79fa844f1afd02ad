"""Request and response shapes of the MCP management endpoints (spec "MCP server management").

Request serializers reject unknown fields. Secrets are write-only: no response serializer has a
field for them.
"""

from __future__ import annotations

from rest_framework import serializers

from agents_app.strict_bodies import StrictSerializer
from mcp_app.security import NAME_RE, NAME_RULE, TRANSPORT_ALIASES, TRANSPORTS


def name_field(**kwargs) -> serializers.RegexField:
    return serializers.RegexField(
        NAME_RE.pattern, max_length=64, error_messages={"invalid": NAME_RULE}, **kwargs
    )


class StringMapField(serializers.DictField):
    def __init__(self, **kwargs):
        super().__init__(child=serializers.CharField(allow_blank=True, max_length=8192), **kwargs)


class OAuthConfigSerializer(StrictSerializer):
    client_id = serializers.CharField(max_length=512)
    auth_url = serializers.CharField(max_length=2048)
    token_url = serializers.CharField(max_length=2048)
    scope = serializers.CharField(max_length=1024, allow_blank=True, required=False, default="")
    client_secret = serializers.CharField(
        max_length=4096, allow_null=True, allow_blank=True, required=False, default=None, write_only=True
    )
    redirect_uri = serializers.CharField(max_length=2048, required=False, allow_blank=True)


class ServerRequestSerializer(StrictSerializer):
    """The add-request fields (plus ``command``/``args``/``env`` for stdio)."""

    name = name_field()
    url = serializers.CharField(max_length=4096, required=False, allow_blank=True, default="")
    transport = serializers.ChoiceField(
        choices=list(TRANSPORT_ALIASES),
        required=False,
        allow_null=True,
        allow_blank=True,
        error_messages={"invalid_choice": f"Invalid transport '{{input}}': use {TRANSPORTS}."},
        help_text="`streamable-http`, `http` (stored as `streamable-http`), `sse` or `stdio`; omitted: try "
        "streamable HTTP, then SSE",
    )
    timeout = serializers.FloatField(min_value=1, max_value=300, required=False, default=30.0)
    auth_token = serializers.CharField(
        max_length=8192, required=False, allow_blank=True, allow_null=True, write_only=True
    )
    headers = StringMapField(required=False, allow_null=True, write_only=True)
    oauth = OAuthConfigSerializer(required=False, allow_null=True)
    command = serializers.CharField(max_length=512, required=False, allow_blank=True, default="")
    args = serializers.ListField(
        child=serializers.CharField(max_length=4096, allow_blank=True),
        required=False,
        max_length=100,
        default=list,
    )
    env = StringMapField(required=False, allow_null=True, write_only=True)


class TestRequestSerializer(ServerRequestSerializer):
    """Same fields as the add request; ``name`` and ``url`` as in the spec's examples."""


class OAuthStartSerializer(StrictSerializer):
    name = name_field()
    url = serializers.RegexField(
        r"^[Hh][Tt][Tt][Pp][Ss]?://",
        max_length=4096,
        error_messages={"invalid": "url must start with http:// or https://."},
    )
    oauth = OAuthConfigSerializer()
    redirect_uri = serializers.CharField(max_length=2048)
    transport = serializers.ChoiceField(
        choices=["streamable-http", "http", "sse"], required=False, allow_null=True
    )
    timeout = serializers.FloatField(min_value=1, max_value=300, required=False, default=30.0)


class OAuthCallbackSerializer(StrictSerializer):
    code = serializers.CharField(max_length=4096)
    state = serializers.CharField(max_length=512)


# --- responses ----------------------------------------------------------------------------------
class ServerRecordSerializer(serializers.Serializer):
    name = serializers.CharField()
    url = serializers.CharField()
    transport = serializers.CharField(help_text="`streamable-http`, `sse` or `stdio`")
    timeout = serializers.FloatField()
    status = serializers.CharField(help_text="`healthy`, `unhealthy` or `unknown`")
    tools_count = serializers.IntegerField()
    tool_names = serializers.ListField(child=serializers.CharField())
    error = serializers.CharField(allow_null=True)
    source = serializers.CharField(
        help_text="`environment` (MCP_ENABLED_SERVERS) or `runtime` (added via the API)"
    )
    has_auth = serializers.BooleanField()
    required = serializers.BooleanField(help_text="listed in MCP_REQUIRED_SERVERS")


class ServerListSerializer(serializers.Serializer):
    servers = ServerRecordSerializer(many=True)
    total = serializers.IntegerField()
    healthy = serializers.IntegerField()
    unhealthy = serializers.IntegerField()


class AddedServerSerializer(serializers.Serializer):
    name = serializers.CharField()
    url = serializers.CharField()
    transport = serializers.CharField(help_text="the transport that worked")
    timeout = serializers.FloatField()
    status = serializers.CharField()
    tools_count = serializers.IntegerField()
    tool_names = serializers.ListField(child=serializers.CharField())
    has_auth = serializers.BooleanField()


class AddServerResponseSerializer(serializers.Serializer):
    status = serializers.CharField(help_text="`success`")
    message = serializers.CharField()
    server = AddedServerSerializer()
    response_time_ms = serializers.FloatField()


class ToolRecordSerializer(serializers.Serializer):
    name = serializers.CharField()
    prefixed_name = serializers.CharField()
    description = serializers.CharField()
    server_name = serializers.CharField()
    input_schema = serializers.DictField()


class TestResponseSerializer(serializers.Serializer):
    status = serializers.CharField(help_text="`healthy`, `connected` (no tools), `unhealthy` or `error`")
    url = serializers.CharField()
    connected = serializers.BooleanField()
    tools_count = serializers.IntegerField()
    tools = ToolRecordSerializer(many=True)
    error = serializers.CharField(allow_null=True)
    response_time_ms = serializers.FloatField()
    transport = serializers.CharField(allow_null=True, help_text="the transport that worked")


class RemoveResponseSerializer(serializers.Serializer):
    status = serializers.CharField(help_text="`success`")
    message = serializers.CharField()
    tools_removed = serializers.IntegerField()
    response_time_ms = serializers.FloatField()


class ToolsResponseSerializer(serializers.Serializer):
    status = serializers.CharField(help_text="`success`")
    total = serializers.IntegerField()
    tools = serializers.ListField(child=serializers.CharField())
    by_server = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))
    filter = serializers.CharField(allow_null=True)
    response_time_ms = serializers.FloatField()


class OAuthStartResponseSerializer(serializers.Serializer):
    auth_url = serializers.CharField()
    state = serializers.CharField()


class OAuthCallbackResponseSerializer(serializers.Serializer):
    success = serializers.BooleanField()
    server_name = serializers.CharField()
    message = serializers.CharField()
    has_token = serializers.BooleanField()


class OAuthStatusResponseSerializer(serializers.Serializer):
    server = serializers.CharField()
    authenticated = serializers.BooleanField()
    oauth_configured = serializers.BooleanField()
    has_refresh_token = serializers.BooleanField()


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()
