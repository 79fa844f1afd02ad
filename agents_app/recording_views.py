"""REST: a session's recording as one WAV (``GET /sessions/{id}/recording``), with byte ranges.

Why this shape: the recording is stored in chunks (:mod:`voiceagent.recording.store`) and may be
long, so it is streamed, never read whole: an async generator reads 256 KB at a time in a thread
(storage calls block; a sync iterator under ASGI would also log Django's warning). A player seeks
with ``Range``; one range is served (206), an unsatisfiable one is 416 with ``{"detail"}``, and
anything else in the header (several ranges, another unit, garbage) is ignored as HTTP allows:
the whole file, 200. The admin's player (:mod:`agents_app.admin`) uses :func:`recording_response`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

from asgiref.sync import async_to_sync
from django.http import HttpRequest, HttpResponseBase, JsonResponse, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.views import APIView

from voiceagent.conversation.session import SESSION_ID_RE, valid_session_id
from voiceagent.errors import ApiError
from voiceagent.recording import store
from voiceagent.transport.live import live_sessions

PIECE_BYTES = 256 * 1024
_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", re.IGNORECASE)


def parse_range(header: str | None, size: int) -> tuple[int, int] | bool | None:
    """``(start, stop)`` of a single satisfiable range (stop exclusive); None for no usable range
    (absent or malformed: the whole file); False when it cannot be satisfied (416)."""
    if not header:
        return None
    match = _RANGE.match(header)
    if match is None:
        return None  # several ranges, another unit, garbage: ignored (RFC 9110 14.2)
    first, last = match.groups()
    if not first and not last:
        return None
    if not first:  # a suffix: the last n bytes
        n = int(last)
        return (max(0, size - n), size) if n > 0 else False
    start = int(first)
    if last and int(last) < start:
        return None  # an invalid range-spec: the header is ignored
    if start >= size:
        return False
    stop = size if not last else min(size, int(last) + 1)
    return start, stop


async def _pieces(wav: store.WavLayout, start: int, stop: int) -> AsyncIterator[bytes]:
    for at in range(start, stop, PIECE_BYTES):
        yield await asyncio.to_thread(wav.read, at, min(stop, at + PIECE_BYTES))


def recording_response(request: HttpRequest, session_id: str) -> HttpResponseBase:
    """The session's WAV (whole or one range), or an error answer ``{"detail"}``."""
    if not valid_session_id(session_id):
        raise ApiError("Invalid session id: 1-128 characters of A-Z a-z 0-9 _ . : -", 400)
    wav = store.layout(session_id)
    if wav is None:
        raise ApiError(f"Session {session_id!r} has no recording.", 404)
    if async_to_sync(live_sessions.live)(session_id):
        raise ApiError(f"Session {session_id!r} is live: its recording is ready once it has ended.", 409)
    if store.being_written(session_id):  # its last seconds are still on their way to the storage
        raise ApiError(f"Session {session_id!r} has ended; its recording is still being written.", 409)
    size = wav.size
    wanted = parse_range(request.headers.get("Range"), size)
    if wanted is False:
        answer = JsonResponse(
            {"detail": f"Range not satisfiable: the recording has {size} bytes."}, status=416
        )
        answer["Content-Range"] = f"bytes */{size}"
        return answer
    start, stop = wanted or (0, size)
    answer = StreamingHttpResponse(
        _pieces(wav, start, stop), content_type="audio/wav", status=206 if wanted else 200
    )
    answer["Content-Length"] = str(stop - start)
    answer["Accept-Ranges"] = "bytes"
    if wanted:
        answer["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
    return answer


class AnyAccept(BaseContentNegotiation):
    """A player asks for ``audio/*``; errors still come as JSON (the only renderer)."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


ERROR = inline_serializer("RecordingError", {"detail": serializers.CharField()})


class SessionRecordingView(APIView):
    content_negotiation_class = AnyAccept

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "session_id",
                {"type": "string", "pattern": SESSION_ID_RE.pattern, "maxLength": 128},
                OpenApiParameter.PATH,
            ),
            OpenApiParameter(
                "Range",
                str,
                OpenApiParameter.HEADER,
                required=False,
                description="One byte range (`bytes=a-b`, `bytes=a-`, `bytes=-n`); anything else is "
                "ignored and the whole recording is sent",
            ),
        ],
        responses={
            (200, "audio/wav"): OpenApiResponse(OpenApiTypes.BINARY, description="the whole recording"),
            (206, "audio/wav"): OpenApiResponse(OpenApiTypes.BINARY, description="the range asked for"),
            404: OpenApiResponse(ERROR, description="no such session, or it has no recording"),
            409: OpenApiResponse(
                ERROR, description="the conversation is still live, or its recording is still being written"
            ),
            416: OpenApiResponse(ERROR, description="the range starts past the end"),
        },
        tags=["sessions"],
        summary="The session's recording (WAV: caller left, agent right)",
    )
    def get(self, request, session_id: str):
        return recording_response(request, session_id)
