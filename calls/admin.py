"""Read-only admin for phone calls: the provider and the callbacks own their state."""

from __future__ import annotations

from django.contrib import admin

from calls.models import Call


@admin.register(Call)
class CallAdmin(admin.ModelAdmin):
    list_display = (
        "connection_id",
        "direction",
        "phone_number",
        "scenario",
        "status",
        "mode",
        "created_at",
        "started_at",
        "ended_at",
        "duration",
    )
    list_filter = ("status", "direction", "mode")
    search_fields = ("connection_id", "phone_number", "session_id", "correlation_id")
    date_hierarchy = "created_at"
    readonly_fields = (
        "connection_id",
        "direction",
        "phone_number",
        "scenario",
        "session_id",
        "status",
        "mode",
        "started_at",
        "ended_at",
        "duration",
        "server_call_id",
        "correlation_id",
        "failure_reason",
        "created_at",
    )
    fields = readonly_fields

    @admin.display(description="duration (s)")
    def duration(self, obj: Call) -> float | None:
        return obj.duration_s

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
