"""The web pages (``/`` and ``/dashboard``), served with a Content-Security-Policy.

The pages keep an API key in ``localStorage``: one injected script could read it. So the pages
load scripts and styles only from the service itself (``'self'``: no inline code, no ``eval``, no
``blob:`` worklet - the microphone's worklet is a static file), talk only to the service
(``connect-src``: its own origin and its WebSockets) and cannot be framed. Every page script and
style is a static file; a new inline ``<script>`` or ``style=`` would be blocked by the browser
(``tests/voiceagent/test_pages.py`` checks the templates).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.views.generic import TemplateView


def page_policy(request: HttpRequest) -> str:
    """The pages' policy; ``connect-src`` names the WebSocket origins of the host the page came
    from (Safari does not count ``ws:`` as ``'self'``). The host passed ALLOWED_HOSTS already."""
    host = request.get_host()
    return "; ".join(
        (
            "default-src 'self'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data:",
            f"connect-src 'self' ws://{host} wss://{host}",
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        )
    )


class PageView(TemplateView):
    """A page template with the pages' Content-Security-Policy."""

    def get(self, request: HttpRequest, *args, **kwargs):
        response = super().get(request, *args, **kwargs)
        response["Content-Security-Policy"] = page_policy(request)
        return response


def favicon(request: HttpRequest) -> HttpResponsePermanentRedirect:
    """``/favicon.ico``, which browsers ask for on any page (the admin, Swagger UI, a JSON
    answer): the service's icon, a static file."""
    return HttpResponsePermanentRedirect(static("voiceagent/favicon.svg"))
