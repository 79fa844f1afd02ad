from django.contrib import admin

from voiceagent.models import ApiKey


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys are created with `manage.py create_api_key`; admin can list and revoke them."""

    list_display = ("name", "prefix", "created_at", "last_used_at", "revoked")
    list_filter = ("revoked",)
    search_fields = ("name", "prefix")
    readonly_fields = ("prefix", "created_at", "last_used_at")

    def has_add_permission(self, request) -> bool:
        return False
