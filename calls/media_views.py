"""``GET /media/status``: the telephony media stream as this worker process sees it."""

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from calls.callmap import audio_format_for
from calls.media import TRANSPORT, WEBSOCKET_PATH, dropped_messages
from voiceagent.connections import tracker


class MediaStatusSerializer(serializers.Serializer):
    mode = serializers.ChoiceField(choices=["MEDIA", "TRANSCRIPTION", "VOICE_LIVE"])
    active_streams = serializers.IntegerField()
    websocket_path = serializers.CharField()
    audio_format = serializers.ChoiceField(choices=["pcm16KMono", "pcm24KMono"])
    dropped_messages = serializers.DictField(
        child=serializers.IntegerField(),
        help_text="Inbound messages dropped by this process's streams since it started, per kind: "
        "malformed (not {kind} JSON), bad_audio, bad_dtmf, binary, unknown_kind",
    )


class MediaStatusView(APIView):
    """What the provider is told when a call starts (path, audio format) and the streams open here,
    so an operator can check a deployment without placing a call."""

    @extend_schema(responses=MediaStatusSerializer, tags=["calls"], summary="Telephony media stream status")
    def get(self, request):
        mode = settings.CONFIG.TELEPHONY_STREAMING_MODE
        return Response(
            {
                "mode": mode,
                "active_streams": tracker.active_count(TRANSPORT),
                "websocket_path": WEBSOCKET_PATH,
                "audio_format": audio_format_for(mode),
                "dropped_messages": dict(dropped_messages),
            }
        )
