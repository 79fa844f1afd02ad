"""The admin's player of a session's recording: its URL and the ``<audio>`` source of the
conversation viewer, kept out of :mod:`agents_app.admin` (one job a module)."""

from __future__ import annotations

from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.urls import path, reverse

from agents_app.recording_views import recording_response
from voiceagent.errors import ApiError
from voiceagent.recording import store

URL_NAME = "agents_app_session_recording"


def player_url(session_id: str) -> str | None:
    """The admin URL of the session's recording, or None when it has none."""
    if not store.parts(session_id):
        return None
    return reverse(f"admin:{URL_NAME}", args=[quote(session_id)])


class RecordingAdminMixin:
    """For ``SessionAdmin``: ``<id>/recording/``, the WAV for staff (the admin's own login)."""

    admin_site: object

    def get_urls(self):
        recording = path(
            "<path:object_id>/recording/",
            self.admin_site.admin_view(self.recording_view),  # type: ignore[attr-defined]
            name=URL_NAME,
        )
        return [recording, *super().get_urls()]  # type: ignore[misc]

    def recording_view(self, request: HttpRequest, object_id: str) -> HttpResponseBase:
        if not self.has_view_permission(request):  # type: ignore[attr-defined]
            raise PermissionDenied
        try:
            return recording_response(request, unquote(object_id))
        except ApiError as exc:
            return JsonResponse({"detail": str(exc.detail)}, status=exc.status_code)
