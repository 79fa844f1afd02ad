from django.apps import AppConfig


class AgentsAppConfig(AppConfig):
    name = "agents_app"
    verbose_name = "Agents, scenarios and sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Hand the runtime the session store, the agent directory, the built-in tools and the
        agent definitions' startup step (the runtime never imports this app)."""
        from voiceagent.contributions import contributions as c

        app = self.name
        c.provide(app, "session_store", "agents_app.sessions.DjangoSessionStore")
        c.provide(app, "agent_directory", "agents_app.directory.CatalogDirectory")
        c.component(app, "core", "session-writers", stop="agents_app.startup.flush_writers")
        c.component(
            app,
            "agents",
            "definitions",
            start="agents_app.startup.start_agents",
            stop="agents_app.startup.stop_agents",
        )
        c.check(app, "agents", "agents_app.startup.agents_check")
        c.tool_source(app, "built-in tools", "agents_app.builtin_tools")
