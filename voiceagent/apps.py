"""The project package is also a Django app: it owns API keys and the service-wide commands."""

from django.apps import AppConfig


class VoiceAgentConfig(AppConfig):
    name = "voiceagent"
    verbose_name = "Voice agent service"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings

        import voiceagent.schema  # noqa: F401  (registers the OpenAPI auth extension)
        from voiceagent.logging import register_secrets

        register_secrets(settings.CONFIG.secret_values)
        register_secrets([settings.SECRET_KEY])
