"""One error shape everywhere under /api/v1: ``{"detail": "<sentence>"}`` (+ ``errors``).

DRF errors go through :func:`api_exception_handler`; Django-level 404/500 (unknown paths,
unhandled exceptions) through :func:`json_404` / :func:`json_500` and
:class:`voiceagent.middleware.ApiErrorMiddleware`. A 500 body says "internal error" and the
request id, nothing else; the traceback goes to the log with that id.

A store that is down - the session cache (Redis) or the database unreachable, restarting or
locked - is not a bug of the request: :func:`unavailable_response` answers 503 ``{"detail"}`` with
``Retry-After`` and logs one WARNING line (no traceback), from the DRF handler and from
:class:`voiceagent.middleware.ApiErrorMiddleware` alike.
"""

from __future__ import annotations

import logging

import redis
from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpResponse, JsonResponse
from django.utils.log import log_response
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from voiceagent.logging import request_id_var

logger = logging.getLogger("voiceagent.errors")

RETRY_AFTER_S = 5
# a store that cannot answer now: the cache's Redis (refused, timed out, loading after a restart) or
# the database (unreachable, restarting, locked)
UNAVAILABLE = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    OperationalError,
    InterfaceError,
)


class ApiError(exceptions.APIException):
    """An error with a chosen status and detail (and optional field errors)."""

    def __init__(self, detail: str, status_code: int = 400, errors: dict | None = None):
        super().__init__(detail)
        self.status_code = status_code
        self.errors = errors


def _first_message(errors) -> str:
    if isinstance(errors, dict):
        for field, value in errors.items():
            msg = _first_message(value)
            return msg if field in ("non_field_errors", "detail") else f"{field}: {msg}"
    if isinstance(errors, list) and errors:
        return _first_message(errors[0])
    return str(errors)


def _plain(errors):
    if isinstance(errors, dict):
        return {k: _plain(v) for k, v in errors.items()}
    if isinstance(errors, list):
        return [_plain(v) for v in errors]
    return str(errors)


def api_exception_handler(exc, context):
    """DRF exception handler producing ``{"detail"}`` bodies for every error."""
    if isinstance(exc, exceptions.ValidationError):
        errors = _plain(exc.detail)
        if not isinstance(errors, dict):
            errors = {"non_field_errors": errors if isinstance(errors, list) else [errors]}
        body = {"detail": f"Invalid request: {_first_message(errors)}", "errors": errors}
        return Response(body, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, ApiError):
        body = {"detail": str(exc.detail)}
        if exc.errors:
            body["errors"] = exc.errors
        response = Response(body, status=exc.status_code)
        if exc.status_code >= 500:
            _log_refusal(context.get("request"), response, body["detail"])
        return response
    if isinstance(exc, RequestDataTooBig):
        return Response({"detail": too_large_detail()}, status=413)
    if isinstance(exc, SuspiciousOperation):
        return Response({"detail": "Bad request."}, status=400)
    if isinstance(exc, exceptions.ParseError):
        return Response({"detail": f"Malformed JSON body: {exc.detail}"}, status=400)
    response = exception_handler(exc, context)
    if response is not None:
        detail = response.data.get("detail") if isinstance(response.data, dict) else None
        response.data = {"detail": str(detail) if detail else _first_message(response.data)}
        return response
    if isinstance(exc, Http404):
        return Response({"detail": "Not found."}, status=404)
    if isinstance(exc, UNAVAILABLE):
        request = context.get("request")
        return unavailable_response(exc, getattr(request, "_request", request), Response)
    return None  # unhandled -> Django's handler500 (json_500)


def _log_refusal(request, response: HttpResponse, detail: str) -> None:
    """A 5xx the service chose to answer (a provider failed: 502; not configured or a store down:
    503) is one WARNING line with its reason: Django's request logger would log it again at ERROR,
    as if it were an incident of ours (``log_response`` marks it logged)."""
    request = getattr(request, "_request", request)
    if request is not None:
        log_response(
            "%s %s: %s, %s",
            request.method,
            request.path,
            response.status_code,
            detail,
            response=response,
            request=request,
            logger=logger,
            level="warning",
        )


def store_name(exc: BaseException) -> str:
    return "session cache" if isinstance(exc, redis.exceptions.RedisError) else "database"


def unavailable_response(exc: BaseException, request, response_class=JsonResponse) -> HttpResponse:
    """503 ``{"detail"}`` + ``Retry-After`` for a store outage, logged once at WARNING (Django's
    request logger would log the 503 again at ERROR; ``log_response`` marks it logged)."""
    store = store_name(exc)
    body = {"detail": f"The {store} is unavailable; try again in a few seconds."}
    response = response_class(body, status=503)
    response["Retry-After"] = str(RETRY_AFTER_S)
    _log_refusal(request, response, f"{store} unavailable ({type(exc).__name__}: {str(exc).strip()[:200]})")
    return response


def too_large_detail() -> str:
    """The ``detail`` of every 413: the limit is ``DATA_UPLOAD_MAX_MEMORY_SIZE``."""
    return f"Request body too large: the limit is {settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 1024} KiB."


def too_large_response() -> JsonResponse:
    return JsonResponse({"detail": too_large_detail()}, status=413)


def internal_error_response() -> JsonResponse:
    rid = request_id_var.get()
    return JsonResponse({"detail": f"internal error (request id {rid})", "request_id": rid}, status=500)


def json_404(request, exception=None) -> JsonResponse:
    return JsonResponse({"detail": f"Not found: {request.path}"}, status=404)


def json_500(request) -> JsonResponse:
    return internal_error_response()


def json_400(request, exception=None) -> JsonResponse:
    return JsonResponse({"detail": "Bad request."}, status=400)


def json_403(request, exception=None) -> JsonResponse:
    return JsonResponse({"detail": "Forbidden."}, status=403)
