"""ASGI entry point for daphne and uvicorn: HTTP + WebSockets behind the lifecycle gate."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "voiceagent.settings")

from channels.routing import ProtocolTypeRouter, URLRouter
from django.core.asgi import get_asgi_application

try:
    django_asgi_app = get_asgi_application()  # sets Django up; full middleware (admin, web page)
except SystemExit as exc:  # settings refused the environment and said why in one line
    # exit 3 (uvicorn's STARTUP_FAILURE): its --workers supervisor stops instead of looping
    raise SystemExit(3 if exc.code == 2 else exc.code) from None

from voiceagent import preflight

preflight.refuse_to_serve()  # production with no API key anywhere: one line, exit 3

from voiceagent.handlers import ApiASGIHandler, HealthFastPath, PathRouter  # noqa: E402

api_asgi_app = ApiASGIHandler()  # lean async middleware for /api/

from voiceagent import access_log, components, servers_compat  # noqa: E402
from voiceagent.lifecycle import LifespanApp, install_twisted_hooks, lifecycle  # noqa: E402
from voiceagent.routing import websocket_urlpatterns  # noqa: E402
from voiceagent.ws_auth import WebSocketAuthStack  # noqa: E402  (needs Django set up)

components.install(lifecycle)
install_twisted_hooks(lifecycle)  # daphne: no lifespan events, use the reactor's triggers
servers_compat.install()  # daphne: send every close code our endpoints use, with its reason
access_log.install()  # daphne's and uvicorn's access lines: secrets masked like ours

application = LifespanApp(
    ProtocolTypeRouter(
        {
            "http": HealthFastPath(PathRouter(api_asgi_app, django_asgi_app)),
            "websocket": WebSocketAuthStack(URLRouter(websocket_urlpatterns)),
        }
    )
)
