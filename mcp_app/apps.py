from django.apps import AppConfig


class McpAppConfig(AppConfig):
    name = "mcp_app"
    verbose_name = "MCP servers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Hand the runtime the MCP manager (step 1), the servers' validation (deferred step 8),
        the ``mcp`` readiness check and the ``/ready`` server list."""
        from voiceagent.contributions import contributions as c

        app, hooks = self.name, "mcp_app.lifecycle"
        c.component(app, "core", "mcp-manager", start=f"{hooks}.start_manager", stop=f"{hooks}.stop_manager")
        c.component(app, "mcp", "mcp-servers", start=f"{hooks}.start_servers")
        c.check(app, "mcp", f"{hooks}.readiness_check")
        c.status_source(app, "mcp_servers", f"{hooks}.status_source")
