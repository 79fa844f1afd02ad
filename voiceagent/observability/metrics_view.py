"""``GET /metrics``: the Prometheus text exposition, protected like the API.

Why a view of its own: a scraper is not an API client - it asks for ``text/plain`` or OpenMetrics,
which the API's JSON-only content negotiation would refuse - but it must show an API key whenever
the API needs one, unless ``METRICS_PUBLIC`` opens it for a scrape port only reachable inside.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse
from rest_framework.exceptions import NotFound
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.views import APIView

from voiceagent.observability import metrics


class AnyAccept(BaseContentNegotiation):
    """Whatever the scraper accepts: the body is chosen by the view; a refusal is JSON."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class MetricsView(APIView):
    """The figures of every worker (multiprocess mode) or of this process."""

    schema = None  # not part of the REST API's OpenAPI document
    content_negotiation_class = AnyAccept

    @staticmethod
    def public() -> bool:
        return bool(settings.CONFIG.METRICS_PUBLIC)  # per request: a test's settings override applies

    def get_authenticators(self):
        return [] if self.public() else super().get_authenticators()

    def get_permissions(self):
        return [] if self.public() else super().get_permissions()

    def get(self, request) -> HttpResponse:
        if not metrics.ENABLED:
            raise NotFound("metrics are off (METRICS_ENABLED=false)")
        body, content_type = metrics.exposition(request.META.get("HTTP_ACCEPT"))
        return HttpResponse(body, content_type=content_type)
