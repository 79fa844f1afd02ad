from django.apps import AppConfig


class CallsConfig(AppConfig):
    name = "calls"
    verbose_name = "Calls and media streams"
    default_auto_field = "django.db.models.BigAutoField"
