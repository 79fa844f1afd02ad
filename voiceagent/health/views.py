"""``/health`` ``/ready`` ``/readiness`` ``/pools`` ``/appconfig`` (bodies: spec + CONTRACTS.md)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from asgiref.sync import async_to_sync
from django.conf import settings
from django.utils.log import log_response
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from voiceagent import auth
from voiceagent.appconfig import appconfig
from voiceagent.connections import tracker
from voiceagent.health import checks
from voiceagent.health.cache import cache_state
from voiceagent.lifecycle import lifecycle
from voiceagent.speech.pools import pool_metrics

logger = logging.getLogger("voiceagent.health")

# MCP status source: the MCP app installs a callable returning {name: {"status", "tools_count"}}.
mcp_status_source: Callable[[], dict[str, dict]] = dict


def set_mcp_status_source(fn: Callable[[], dict[str, dict]]) -> None:
    global mcp_status_source
    mcp_status_source = fn


class SessionMetricsSerializer(serializers.Serializer):
    connected = serializers.IntegerField()
    disconnected = serializers.IntegerField()
    active = serializers.IntegerField()


class HealthSerializer(serializers.Serializer):
    status = serializers.CharField(help_text="`healthy` when running")
    timestamp = serializers.FloatField(help_text="epoch seconds")
    message = serializers.CharField()
    active_sessions = serializers.IntegerField()
    session_metrics = SessionMetricsSerializer()


class WarmupResultsSerializer(serializers.Serializer):
    openai = serializers.BooleanField()
    tts_pool = serializers.IntegerField()
    stt_pool = serializers.IntegerField()


class McpServerStateSerializer(serializers.Serializer):
    status = serializers.CharField()
    tools_count = serializers.IntegerField()


class CacheStateSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["healthy", "unhealthy", "not_configured"])
    detail = serializers.CharField()


class ReadyDetailsSerializer(serializers.Serializer):
    warmup_results = WarmupResultsSerializer()
    mcp_servers = serializers.DictField(child=McpServerStateSerializer())
    steps = serializers.DictField(
        child=serializers.DictField(), help_text="per startup step: status, duration_ms"
    )
    cache = CacheStateSerializer(help_text="the shared session cache; unhealthy (Redis down): /ready is 503")


class ReadyPoolsSerializer(serializers.Serializer):
    tts = serializers.IntegerField()
    stt = serializers.IntegerField()


DETAILS_NEED_A_KEY = "in production only with an API key (anonymous probes get the status only)"


class ReadySerializer(serializers.Serializer):
    ready = serializers.BooleanField()
    timestamp = serializers.FloatField()
    deferred_startup_complete = serializers.BooleanField(required=False, help_text=DETAILS_NEED_A_KEY)
    warmup_completed = serializers.BooleanField(required=False, help_text=DETAILS_NEED_A_KEY)
    mcp_ready = serializers.BooleanField(required=False, help_text=DETAILS_NEED_A_KEY)
    details = ReadyDetailsSerializer(required=False, help_text=DETAILS_NEED_A_KEY)
    status = serializers.ChoiceField(
        choices=["ready", "starting", "unavailable"],
        help_text="unavailable: started, but the shared session cache (Redis) does not answer",
    )
    mcp = serializers.ChoiceField(
        choices=["connected", "partial", "disconnected", "none"], required=False, help_text=DETAILS_NEED_A_KEY
    )
    pools = ReadyPoolsSerializer(required=False, help_text=DETAILS_NEED_A_KEY)


class CheckSerializer(serializers.Serializer):
    component = serializers.ChoiceField(choices=list(checks.COMPONENTS))
    status = serializers.ChoiceField(choices=["healthy", "unhealthy", "not_configured"])
    detail = serializers.CharField()
    check_time_ms = serializers.FloatField()


class ReadinessSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["ready", "unhealthy"])
    timestamp = serializers.FloatField()
    checks = CheckSerializer(many=True, required=False, help_text=DETAILS_NEED_A_KEY)


class PoolSerializer(serializers.Serializer):
    size = serializers.IntegerField(help_text="clients kept warm (TTS_POOL_SIZE / STT_POOL_SIZE)")
    max_size = serializers.IntegerField(
        help_text="most clients at once: BROWSER_MAX_CONNECTIONS + TELEPHONY_MAX_STREAMS"
    )
    clients = serializers.IntegerField(help_text="clients now: in use, idle or being made")
    available = serializers.IntegerField(help_text="leases possible without waiting: idle + room to grow")
    in_use = serializers.IntegerField()
    utilization = serializers.FloatField(help_text="in_use / max_size, 0..1 (1: new requests wait)")
    waiters = serializers.IntegerField(help_text="requests waiting because the pool is at max_size")
    acquired_total = serializers.IntegerField()
    refused_total = serializers.IntegerField(
        help_text="requests refused at max_size after POOL_ACQUIRE_TIMEOUT (told as stt_error/tts_error)"
    )
    created_total = serializers.IntegerField(help_text="clients made, warm ones included")
    trimmed_total = serializers.IntegerField(help_text="clients beyond size closed after idling")
    peak_in_use = serializers.IntegerField()
    wait_ms_p95 = serializers.FloatField()
    provider = serializers.CharField()
    queue = serializers.DictField(
        required=False,
        help_text="offline Whisper only: its recogniser's queue (depth, deepest, served / skipped_stale by "
        "kind final|pause|interim, wait_ms and decode_ms p50/p95/max by kind, batches, batched_requests, "
        "greedy_requests, narrowed_requests)",
    )


class PoolsBodySerializer(serializers.Serializer):
    tts = PoolSerializer()
    stt = PoolSerializer()


class PoolsSerializer(serializers.Serializer):
    pools = PoolsBodySerializer()
    timestamp = serializers.FloatField()


class AppConfigSerializer(serializers.Serializer):
    provider = serializers.ChoiceField(choices=["environment", "file"])
    enabled = serializers.BooleanField()
    source = serializers.CharField()
    keys = serializers.ListField(child=serializers.CharField(), help_text="names only, never values")
    last_refresh = serializers.FloatField(allow_null=True)
    status = serializers.CharField()


class AppConfigRefreshSerializer(AppConfigSerializer):
    changed = serializers.ListField(child=serializers.CharField())


def health_body() -> dict:
    """The ``/health`` body; also served by :class:`voiceagent.handlers.HealthFastPath`."""
    metrics = tracker.metrics()
    return {
        "status": "healthy",
        "timestamp": time.time(),
        "message": "Voice agent backend is running",
        "active_sessions": metrics["active"],
        "session_metrics": metrics,
    }


class HealthView(APIView):
    """Liveness: 200 once the blocking startup steps are done."""

    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(responses=HealthSerializer, tags=["health"], auth=[], summary="Liveness")
    def get(self, request):
        metrics = tracker.metrics()
        return Response(
            {
                "status": "healthy",
                "timestamp": time.time(),
                "message": "Voice agent backend is running",
                "active_sessions": metrics["active"],
                "session_metrics": metrics,
            }
        )


def with_details(request) -> bool:
    """Whether a probe's answer may carry its details. In production an anonymous caller gets the
    status only: the details name the Redis host and port, the providers, servers and counts."""
    if not settings.PRODUCTION:
        return True
    raw = auth.extract_key(request.META)
    return bool(raw and auth.check_key(raw))


STATUS_ONLY = {"ready", "status", "timestamp"}


def _probe_answer(request, body: dict, healthy: bool, level: str, why: str) -> Response:
    """The probe's answer; a 503 is logged once at ``level`` (below ERROR) with ``why``.

    A 503 of a readiness probe is an answer, not an incident: a load balancer polls it during
    every startup. Django's request logger would log each one at ERROR; marking the response as
    logged (Django's own ``log_response``) keeps that single, quieter line instead.
    """
    if not with_details(request):
        body = {k: v for k, v in body.items() if k in STATUS_ONLY}
    response = Response(body, status=200 if healthy else 503)
    if not healthy:
        args = (request.method, request.path, why)
        log_response("%s %s: 503, %s", *args, response=response, request=request, logger=logger, level=level)
    return response


def _mcp_summary(servers: dict[str, dict]) -> str:
    if not servers:
        return "none"
    healthy = sum(1 for s in servers.values() if s.get("status") == "healthy")
    if healthy == len(servers):
        return "connected"
    return "partial" if healthy else "disconnected"


class ReadyView(APIView):
    """Readiness: 200 only when the deferred startup steps (warmup, mcp) are complete and the
    shared session cache answers (when Redis is configured)."""

    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(
        responses={200: ReadySerializer, 503: ReadySerializer},
        tags=["health"],
        auth=[],
        summary="Readiness (deferred startup complete)",
    )
    def get(self, request):
        started = lifecycle.accepting and lifecycle.deferred_startup_complete
        cache = cache_state()
        ready = started and cache["status"] != "unhealthy"
        servers = {
            name: {"status": s.get("status", "unknown"), "tools_count": int(s.get("tools_count", 0))}
            for name, s in mcp_status_source().items()
        }
        warm = dict(lifecycle.warmup_results)
        metrics = pool_metrics()
        body = {
            "ready": ready,
            "timestamp": time.time(),
            "deferred_startup_complete": lifecycle.deferred_startup_complete,
            "warmup_completed": lifecycle.warmup_completed,
            "mcp_ready": lifecycle.mcp_ready,
            "details": {
                "warmup_results": {
                    "openai": bool(warm.get("openai", False)),
                    "tts_pool": int(warm.get("tts_pool", 0)),
                    "stt_pool": int(warm.get("stt_pool", 0)),
                },
                "mcp_servers": servers,
                "steps": {
                    name: {"status": r.status, "duration_ms": r.duration_ms}
                    for name, r in lifecycle.results.items()
                },
                "cache": cache,
            },
            "status": "ready" if ready else ("unavailable" if started else "starting"),
            "mcp": _mcp_summary(servers),
            "pools": {"tts": metrics["tts"]["warm"], "stt": metrics["stt"]["warm"]},
        }
        if started:  # a store outage: a WARNING line per probe answer, as /readiness logs its 503s
            return _probe_answer(request, body, ready, "warning", f"session cache {cache['detail']}")
        return _probe_answer(request, body, ready, "info", "not ready yet (deferred startup steps running)")


class ReadinessView(APIView):
    """Deep health: each dependency checked concurrently with a 2 s timeout."""

    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(
        responses={200: ReadinessSerializer, 503: ReadinessSerializer},
        tags=["health"],
        auth=[],
        summary="Deep dependency checks",
    )
    def get(self, request):
        body = async_to_sync(checks.run_checks)()
        failing = [c["component"] for c in body["checks"] if c["status"] == "unhealthy"]
        why = "unhealthy: " + ", ".join(failing)
        return _probe_answer(request, body, body["status"] == "ready", "warning", why)


class PoolsView(APIView):
    """Speech synthesis and recognition client pool metrics."""

    @extend_schema(responses=PoolsSerializer, tags=["health"], summary="Speech client pools")
    def get(self, request):
        metrics = pool_metrics()
        pools = {name: {k: v for k, v in m.items() if k != "warm"} for name, m in metrics.items()}
        return Response({"pools": pools, "timestamp": time.time()})


class AppConfigView(APIView):
    """Dynamic-configuration provider status (key names, never secret values)."""

    @extend_schema(responses=AppConfigSerializer, tags=["health"], summary="Dynamic configuration status")
    def get(self, request):
        return Response(appconfig().describe())


class AppConfigRefreshView(APIView):
    """Re-read the dynamic configuration now and report which keys changed."""

    @extend_schema(
        request=None,
        responses=AppConfigRefreshSerializer,
        tags=["health"],
        summary="Refresh dynamic configuration",
    )
    def post(self, request):
        provider = appconfig()
        changed = provider.refresh()
        return Response({**provider.describe(), "changed": changed})
