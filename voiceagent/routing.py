"""WebSocket routes (all under /api/v1). Transports add their consumers here."""

websocket_urlpatterns: list = []
