"""Admin for MCP servers: add, edit, test and remove; secrets are write-only.

Secret inputs (bearer token, header and stdio-environment JSON, OAuth client secret) are
password fields that never render the stored value; leaving one blank keeps what is stored, the
"clear" boxes remove it. Saving connects the server on this worker (the result is shown as a
message) and tells the other workers; deleting disconnects and unregisters its tools. Rows of
environment servers (``MCP_ENABLED_SERVERS``) are read-only and cannot be deleted here.
"""

from __future__ import annotations

import json
import logging

from django import forms
from django.contrib import admin, messages
from django.db import transaction

from mcp_app.failures import ServerError
from mcp_app.manager import get_manager
from mcp_app.models import McpServer
from mcp_app.security import InvalidServer, check_headers, check_name, check_server_url, check_stdio_command
from mcp_app.store import config_from_row, environment_configs

logger = logging.getLogger("mcp_app.admin")

SECRET_FIELDS = {
    "auth_token": "bearer token",
    "headers": "headers",
    "env": "stdio environment",
    "oauth_client_secret": "OAuth client secret",
}
KEEP = "Write-only: leave blank to keep the stored value."


def _json_object(text: str, label: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError:
        raise forms.ValidationError(f"{label} must be a JSON object.") from None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise forms.ValidationError(f"{label} must be a JSON object of strings.")
    return value


class McpServerForm(forms.ModelForm):
    # (form names differ from the model columns, so the admin never copies a blank over a secret)
    new_auth_token = forms.CharField(
        required=False, widget=forms.PasswordInput(render_value=False), label="Bearer token", help_text=KEEP
    )
    headers_json = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        label="Headers (JSON object)",
        help_text=KEEP + ' Example: {"X-Api-Key": "..."}',
    )
    env_json = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        label="stdio environment (JSON object)",
        help_text=KEEP,
    )
    oauth_client_secret = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        label="OAuth client secret",
        help_text=KEEP,
    )
    clear = forms.MultipleChoiceField(
        required=False,
        choices=list(SECRET_FIELDS.items()),
        widget=forms.CheckboxSelectMultiple,
        label="Clear stored secrets",
    )

    class Meta:
        model = McpServer
        fields = (
            "name",
            "url",
            "transport",
            "timeout",
            "command",
            "args",
            "oauth_client_id",
            "oauth_auth_url",
            "oauth_token_url",
            "oauth_scope",
            "oauth_redirect_uri",
        )

    def clean(self):
        cleaned = super().clean()
        try:
            if cleaned.get("name") is not None:
                check_name(cleaned["name"])
            if cleaned.get("transport") == "stdio":
                check_stdio_command(cleaned.get("command") or "")
            elif "url" in cleaned:  # the REST views' validation, SSRF guard included
                cleaned["url"] = check_server_url(cleaned.get("url") or "")
            for key in ("oauth_auth_url", "oauth_token_url"):
                if cleaned.get(key):
                    cleaned[key] = check_server_url(cleaned[key], key)
        except InvalidServer as exc:
            field = exc.field if exc.field in self.fields else None
            self.add_error(field, str(exc))
        if cleaned.get("headers_json"):
            try:
                cleaned["headers_value"] = check_headers(_json_object(cleaned["headers_json"], "Headers"))
            except forms.ValidationError as exc:
                self.add_error("headers_json", exc)
            except InvalidServer as exc:
                self.add_error("headers_json", str(exc))
        if cleaned.get("env_json"):
            try:
                cleaned["env_value"] = _json_object(cleaned["env_json"], "Environment")
            except forms.ValidationError as exc:
                self.add_error("env_json", exc)
        args = cleaned.get("args")
        if args is not None and (not isinstance(args, list) or not all(isinstance(a, str) for a in args)):
            self.add_error("args", "args must be a JSON array of strings.")
        return cleaned

    def save(self, commit: bool = True):
        obj = super().save(commit=False)
        cleaned = self.cleaned_data
        for key in cleaned.get("clear") or ():
            setattr(obj, key, {} if key in ("headers", "env") else "")
        if cleaned.get("new_auth_token"):
            obj.auth_token = cleaned["new_auth_token"]
        if cleaned.get("headers_value") is not None:
            obj.headers = cleaned["headers_value"]
        if cleaned.get("env_value") is not None:
            obj.env = cleaned["env_value"]
        if cleaned.get("new_oauth_client_secret"):
            obj.oauth_client_secret = cleaned["new_oauth_client_secret"]
        if commit:
            obj.save()
        return obj


def _message_for(record: dict | None) -> tuple[int, str]:
    if record is None:
        return messages.WARNING, "server not found"
    if record["status"] == "healthy":
        return (
            messages.SUCCESS,
            f"connected over {record['transport']}: {record['tools_count']} tools registered",
        )
    return messages.WARNING, f"saved, but not connected: {record['error']}"


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):
    form = McpServerForm
    list_display = ("name", "source", "transport", "status", "tools_count", "has_auth", "updated_at")
    list_filter = ("source", "status", "transport")
    search_fields = ("name", "url")
    actions = ["test_connection"]
    readonly_fields = (
        "source",
        "status",
        "error",
        "tool_names",
        "stored_secrets",
        "token_expires_at",
        "last_connected_at",
        "created_at",
        "updated_at",
    )

    @admin.display(description="tools")
    def tools_count(self, obj: McpServer) -> int:
        return len(obj.tool_names or [])

    @admin.display(boolean=True, description="auth")
    def has_auth(self, obj: McpServer) -> bool:
        return obj.has_auth

    @admin.display(description="stored secrets")
    def stored_secrets(self, obj: McpServer) -> str:
        present = [label for key, label in SECRET_FIELDS.items() if getattr(obj, key)]
        if obj.access_token:
            present.append("OAuth access token")
        if obj.refresh_token:
            present.append("OAuth refresh token")
        return ", ".join(present) or "none"

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and obj.source == "environment":
            return [f.name for f in McpServer._meta.fields if f.name not in SECRET_FIELDS] + [
                "stored_secrets",
                "tools_count",
            ]
        return self.readonly_fields

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is not None and obj.source == "environment":
            kwargs["form"] = forms.ModelForm
            kwargs["fields"] = []
        return super().get_form(request, obj, change=change, **kwargs)

    def has_delete_permission(self, request, obj=None):
        if obj is not None and obj.source == "environment":
            return False
        return super().has_delete_permission(request, obj)

    def save_model(self, request, obj, form, change):
        if obj.source == "environment":
            return
        if not change:
            obj.source = "runtime"
            obj.status = "unknown"
        super().save_model(request, obj, form, change)
        action = "updated" if change else "added"
        transaction.on_commit(lambda: self._apply(request, obj.name, action))

    def _apply(self, request, name: str, action: str) -> None:
        manager = get_manager()
        try:
            record = manager.run(manager.reload(name), timeout=120)
        except Exception as exc:
            self.message_user(request, f"MCP server {name}: connecting failed: {exc}", messages.WARNING)
            return
        level, text = _message_for(record)
        self.message_user(request, f"MCP server {name}: {text}", level)
        try:
            manager.run(manager.notify(name, action), timeout=5)
        except Exception as exc:
            logger.warning("MCP server %s: other workers not notified (%s)", name, exc)

    def _forget(self, names: list[str]) -> None:
        manager = get_manager()
        for name in names:
            try:
                manager.run(manager.remove(name), timeout=30)
                manager.run(manager.notify(name, "removed"), timeout=5)
            except Exception as exc:
                logger.warning("MCP server %s: removal not applied everywhere (%s)", name, exc)

    def delete_model(self, request, obj):
        name = obj.name
        super().delete_model(request, obj)
        transaction.on_commit(lambda: self._forget([name]))

    def delete_queryset(self, request, queryset):
        queryset = queryset.filter(source="runtime")
        names = list(queryset.values_list("name", flat=True))
        super().delete_queryset(request, queryset)
        transaction.on_commit(lambda: self._forget(names))

    @admin.action(description="Test connection (connect and list tools, nothing registered)")
    def test_connection(self, request, queryset):
        manager = get_manager()
        env = {c.name: c for c in environment_configs()}
        for row in queryset:
            config = env.get(row.name) if row.source == "environment" else config_from_row(row)
            if config is None:
                self.message_user(request, f"{row.name}: no longer in MCP_ENABLED_SERVERS", messages.WARNING)
                continue
            try:
                transport, tools = manager.run(manager.test(config), timeout=2 * config.timeout + 15)
            except (ServerError, TimeoutError) as exc:
                self.message_user(request, f"{row.name}: failed: {exc}", messages.ERROR)
                continue
            level = messages.SUCCESS if tools else messages.WARNING
            self.message_user(request, f"{row.name}: connected over {transport}, {len(tools)} tools", level)
