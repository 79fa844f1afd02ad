"""Request ids on every log line, and JSON errors for anything under /api/v1."""

from __future__ import annotations

import logging
import re
import uuid

from django.http import HttpRequest, HttpResponse, JsonResponse

from voiceagent.errors import internal_error_response
from voiceagent.logging import request_id_var

logger = logging.getLogger("voiceagent.request")
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
API_PREFIX = "/api/v1/"


class RequestIdMiddleware:
    """Accept a sane incoming ``X-Request-ID`` or make one; echo it back."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        incoming = request.headers.get("X-Request-ID", "")
        rid = incoming if _SAFE_ID.match(incoming) else uuid.uuid4().hex[:16]
        token = request_id_var.set(rid)
        request.request_id = rid
        try:
            response = self.get_response(request)
        finally:
            request_id_var.reset(token)
        response["X-Request-ID"] = rid
        return response


class ApiErrorMiddleware:
    """Turn any unhandled exception or HTML error under /api/v1 into a JSON ``{"detail"}``."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            request.path.startswith(API_PREFIX)
            and response.status_code >= 400
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            return JsonResponse({"detail": response.reason_phrase or "Error."}, status=response.status_code)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not request.path.startswith(API_PREFIX):
            return None
        logger.error("unhandled error on %s %s", request.method, request.path, exc_info=exception)
        return internal_error_response()
