from django.apps import AppConfig


class CallsConfig(AppConfig):
    name = "calls"
    verbose_name = "Calls and media streams"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Hand the runtime the telephony caller's cleanup and its readiness check."""
        from voiceagent.contributions import contributions as c

        c.component(self.name, "services", "telephony-caller", stop="calls.startup.stop_telephony")
        c.check(self.name, "telephony", "calls.twilio_api.readiness_check")
