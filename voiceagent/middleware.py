"""Request ids on every log line, the Host checked, JSON errors for anything under /api/v1, one body limit.

Both middlewares are sync- and async-capable, so under ASGI the whole chain stays on the event
loop and only a sync view hops to a thread (each extra hop costs ~1 ms under load).
"""

from __future__ import annotations

import logging
import re
import uuid

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.exceptions import DisallowedHost, RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse

from voiceagent.errors import UNAVAILABLE, internal_error_response, too_large_response, unavailable_response
from voiceagent.logging import request_id_var

logger = logging.getLogger("voiceagent.request")
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
API_PREFIX = "/api/v1/"
#: Probes answer whatever the Host (an orchestrator probes the pod's address); anonymous callers
#: get only the status there (voiceagent/health/views.py).
PROBE_PATHS = frozenset({"/api/v1/health", "/api/v1/ready", "/api/v1/readiness"})
BAD_HOST_DETAIL = "Bad request: this service does not answer to that Host header (ALLOWED_HOSTS)."


class _Middleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest):
        if self.is_async:
            return self._acall(request)
        return self._call(request)


class RequestIdMiddleware(_Middleware):
    """Accept a sane incoming ``X-Request-ID`` or make one; echo it back (and set Content-Length)."""

    @staticmethod
    def _begin(request: HttpRequest):
        incoming = request.headers.get("X-Request-ID", "")
        rid = incoming if _SAFE_ID.match(incoming) else uuid.uuid4().hex[:16]
        request.request_id = rid
        return rid, request_id_var.set(rid)

    def _call(self, request: HttpRequest) -> HttpResponse:
        rid, token = self._begin(request)
        try:
            response = self.get_response(request)
        finally:
            request_id_var.reset(token)
        return _finish(response, rid)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        rid, token = self._begin(request)
        try:
            response = await self.get_response(request)
        finally:
            request_id_var.reset(token)
        return _finish(response, rid)


def _finish(response: HttpResponse, rid: str) -> HttpResponse:
    response["X-Request-ID"] = rid
    if not response.streaming and "Content-Length" not in response:
        response["Content-Length"] = str(len(response.content))
    return response


class AllowedHostMiddleware(_Middleware):
    """400 ``{"detail"}`` for a ``Host`` outside ``ALLOWED_HOSTS``, on every path but the probes.

    Why: Django checks the host only when something asks for it (``CommonMiddleware``, CSRF), which
    the lean API stack never did, so ``GET /api/v1/agents`` answered any Host; and where Django
    does refuse, it logs ``django.security.DisallowedHost`` at ERROR with a traceback that any
    anonymous client can trigger. Here a refusal is one WARNING line.
    """

    @staticmethod
    def _refused(request: HttpRequest) -> HttpResponse | None:
        if request.path in PROBE_PATHS:
            return None
        try:
            request.get_host()
        except DisallowedHost:
            forwarded = settings.USE_X_FORWARDED_HOST and request.META.get("HTTP_X_FORWARDED_HOST")
            host = forwarded or request.META.get("HTTP_HOST", "")
            logger.warning(
                "refused %s %s: Host %r is not in ALLOWED_HOSTS",
                request.method,
                request.path[:200],
                host[:100],
            )
            return JsonResponse({"detail": BAD_HOST_DETAIL}, status=400)
        return None

    def _call(self, request: HttpRequest) -> HttpResponse:
        return self._refused(request) or self.get_response(request)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        refused = self._refused(request)
        if refused is not None:
            return refused
        return await self.get_response(request)


class ApiErrorMiddleware(_Middleware):
    """Turn any unhandled exception or HTML error under /api/v1 into a JSON ``{"detail"}``."""

    @staticmethod
    def _jsonify(request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if (
            response.status_code >= 400
            and request.path.startswith(API_PREFIX)
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            return JsonResponse({"detail": response.reason_phrase or "Error."}, status=response.status_code)
        return response

    def _call(self, request: HttpRequest) -> HttpResponse:
        return self._jsonify(request, self.get_response(request))

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        return self._jsonify(request, await self.get_response(request))

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not request.path.startswith(API_PREFIX):
            return None
        if isinstance(exception, UNAVAILABLE):  # a store outage: 503, one WARNING line
            return unavailable_response(exception, request)
        logger.error("unhandled error on %s %s", request.method, request.path, exc_info=exception)
        return internal_error_response()


class BodyLimitMiddleware(_Middleware):
    """413 ``{"detail"}`` for a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE``, and 400 for a URL holding
    a NUL character, before any view runs.

    Why here and not in the views: endpoints that parse their body themselves (the telephony
    webhooks answered 400) or never read it (they answered 200) all give the same answer this way,
    including endpoints added later. A declared ``Content-Length`` is enough to decide; a body sent
    without one (chunked) is read up to the limit, which the view would do anyway.
    """

    @staticmethod
    def _too_large(request: HttpRequest) -> HttpResponse | None:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        declared = request.META.get("CONTENT_LENGTH")
        if limit is None or request.method in ("GET", "HEAD", "OPTIONS"):
            return None
        if declared:
            try:
                return too_large_response() if int(declared) > limit else None
            except ValueError:
                return None
        try:
            request.body  # noqa: B018 - reads at most limit + 1 bytes, and keeps them for the view
        except RequestDataTooBig:
            return too_large_response()
        return None

    @staticmethod
    def _nul_in_url(request: HttpRequest) -> HttpResponse | None:
        """400 for a NUL character in the path or the query: a view that looks it up (an MCP
        server's name, a profile's id) handed it to PostgreSQL, which refuses it (a 500)."""
        if "\x00" in request.path_info or "%00" in request.META.get("QUERY_STRING", ""):
            return JsonResponse(
                {"detail": "Bad request: NUL (%00) characters are not allowed in a URL."}, status=400
            )
        return None

    def _call(self, request: HttpRequest) -> HttpResponse:
        return self._nul_in_url(request) or self._too_large(request) or self.get_response(request)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        refused = self._nul_in_url(request) or self._too_large(request)
        if refused is not None:
            return refused
        return await self.get_response(request)


class ApiSecurityMiddleware(_Middleware):
    """The parts of Django's SecurityMiddleware an API needs, without a thread hop per request.

    HTTPS redirect (health probes exempt), HSTS, nosniff, frame and referrer policies, driven by
    the same settings ``check --deploy`` inspects.
    """

    def __init__(self, get_response):
        super().__init__(get_response)
        self.redirect = settings.SECURE_SSL_REDIRECT
        self.exempt = [re.compile(r) for r in getattr(settings, "SECURE_REDIRECT_EXEMPT", [])]
        hsts = getattr(settings, "SECURE_HSTS_SECONDS", 0)
        self.hsts = None
        if hsts:
            self.hsts = f"max-age={hsts}"
            if getattr(settings, "SECURE_HSTS_INCLUDE_SUBDOMAINS", False):
                self.hsts += "; includeSubDomains"
            if getattr(settings, "SECURE_HSTS_PRELOAD", False):
                self.hsts += "; preload"

    def _redirect(self, request: HttpRequest) -> HttpResponse | None:
        if self.redirect and not request.is_secure():
            path = request.path.lstrip("/")
            if not any(p.search(path) for p in self.exempt):
                from django.http import HttpResponsePermanentRedirect

                return HttpResponsePermanentRedirect(f"https://{request.get_host()}{request.get_full_path()}")
        return None

    def _headers(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        if self.hsts and request.is_secure():
            response.headers.setdefault("Strict-Transport-Security", self.hsts)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("Cross-Origin-Opener-Policy", "same-origin")
        return response

    def _call(self, request: HttpRequest) -> HttpResponse:
        return self._redirect(request) or self._headers(request, self.get_response(request))

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        redirect = self._redirect(request)
        if redirect is not None:
            return redirect
        return self._headers(request, await self.get_response(request))
