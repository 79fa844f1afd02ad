"""``GET /contactcenter/health``: the bridge's own liveness, for the contact center's probe."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

SERVICE = "contactcenter-audiohook"


class ContactCenterHealthSerializer(serializers.Serializer):
    status = serializers.CharField()
    service = serializers.CharField()


class ContactCenterHealthView(APIView):
    """Open like /health: the contact center checks it without the service's API keys."""

    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(
        responses=ContactCenterHealthSerializer, tags=["contact center"], auth=[], summary="Bridge liveness"
    )
    def get(self, request):
        return Response({"status": "ok", "service": SERVICE})
