"""``GET /browser/status``."""

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from voiceagent.connections import tracker


class BrowserStatusSerializer(serializers.Serializer):
    active_conversations = serializers.IntegerField()
    dashboard_clients = serializers.IntegerField()
    max_connections = serializers.IntegerField()


class BrowserStatusView(APIView):
    """Browser conversations and dashboard clients connected to this worker process."""

    @extend_schema(responses=BrowserStatusSerializer, tags=["browser"], summary="Browser transport status")
    def get(self, request):
        return Response(
            {
                "active_conversations": tracker.active_count("browser"),
                "dashboard_clients": tracker.active_count("dashboard"),
                "max_connections": settings.CONFIG.BROWSER_MAX_CONNECTIONS,
                "scope": "this worker process",
            }
        )
