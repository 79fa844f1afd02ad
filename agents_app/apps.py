from django.apps import AppConfig


class AgentsAppConfig(AppConfig):
    name = "agents_app"
    verbose_name = "Agents, scenarios and sessions"
    default_auto_field = "django.db.models.BigAutoField"
