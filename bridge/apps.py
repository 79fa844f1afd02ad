from django.apps import AppConfig


class BridgeConfig(AppConfig):
    name = "bridge"
    verbose_name = "Contact-center AudioHook bridge"
    default_auto_field = "django.db.models.BigAutoField"
