"""WebSocket routes (all under /api/v1). Transports add their consumers here."""

from channels.generic.websocket import AsyncWebsocketConsumer
from django.urls import path, re_path

from bridge.consumer import AudioHookConsumer
from bridge.monitor import AudioHookMonitorConsumer
from calls.browser import BrowserConversationConsumer
from calls.dashboard import DashboardRelayConsumer
from calls.media import MediaStreamConsumer
from calls.twilio_stream import TwilioStreamConsumer
from voiceagent.servers_compat import fit_close_reason


class UnknownPathConsumer(AsyncWebsocketConsumer):
    """Any other WebSocket path: a clean close with a reason instead of a server error."""

    async def connect(self) -> None:
        await self.accept()
        await self.close(code=4404, reason=fit_close_reason(f"no WebSocket endpoint at {self.scope['path']}"))


websocket_urlpatterns = [
    path("api/v1/browser/conversation", BrowserConversationConsumer.as_asgi()),
    path("api/v1/browser/dashboard/relay", DashboardRelayConsumer.as_asgi()),
    path("api/v1/contactcenter/stream", AudioHookConsumer.as_asgi()),
    path("api/v1/contactcenter/monitor", AudioHookMonitorConsumer.as_asgi()),
    path("api/v1/media/stream", MediaStreamConsumer.as_asgi()),
    path("api/v1/twilio/stream", TwilioStreamConsumer.as_asgi()),
    re_path(r"", UnknownPathConsumer.as_asgi()),
]
