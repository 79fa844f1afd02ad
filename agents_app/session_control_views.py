"""REST: a person takes a live conversation over, speaks through it and hands it back (issue 32).

``POST /sessions/{id}/takeover``, ``/say`` and ``/handback`` reach the conversation whichever
worker holds it (:mod:`voiceagent.transport.control`); 404 when no conversation of that session is
live, 409 when its state refuses the request (a second takeover, a line or a handback without a
takeover). The conversation does the rest (:mod:`voiceagent.conversation.takeover`).
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agents_app.strict_bodies import StrictSerializer
from agents_app.views import SESSION_PATH, _check_session_id
from voiceagent.errors import ApiError
from voiceagent.transport import control

DEFAULT_PERSON = "operator"
PERSON_NAME = r"^[\w][\w .@'-]{0,63}$"  # a name a person is shown by: letters, digits, a few marks


def _person_field() -> serializers.RegexField:
    return serializers.RegexField(
        PERSON_NAME,
        required=False,
        max_length=64,
        help_text=f"who (shown on the dashboard and kept in the history); default {DEFAULT_PERSON!r}",
    )


class PersonRequestSerializer(StrictSerializer):
    by = _person_field()


class SayRequestSerializer(StrictSerializer):
    text = serializers.RegexField(  # the schema says what is refused: no NUL character (DRF's rule)
        r"^[^\x00]+$",
        min_length=1,
        max_length=1000,
        help_text="spoken in the agent's voice",
        error_messages={"invalid": "Null characters are not allowed."},
    )
    by = _person_field()


class ControlErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()


class TakeoverSerializer(serializers.Serializer):
    session_id = serializers.CharField()
    taken_over = serializers.BooleanField()
    by = serializers.CharField()
    answering = serializers.BooleanField(
        required=False, help_text="handback: the agent answers now (the caller spoke last)"
    )


class SaidSerializer(serializers.Serializer):
    session_id = serializers.CharField()
    said = serializers.CharField()
    by = serializers.CharField()


REFUSED = {404: ControlErrorSerializer, 409: ControlErrorSerializer, 503: ControlErrorSerializer}


def _control(session_id: str, action: str, args: dict[str, Any]) -> Response:
    _check_session_id(session_id)
    result = async_to_sync(control.request)(session_id, action, args)
    if not result.ok:
        raise ApiError(result.detail, result.status)
    return Response({"session_id": session_id, **result.body})


def _body(serializer_class: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    serializer = serializer_class(data=data if data else {})
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class SessionTakeoverView(APIView):
    @extend_schema(
        request=PersonRequestSerializer,
        parameters=[SESSION_PATH],
        responses={200: TakeoverSerializer, **REFUSED},
        tags=["sessions"],
        summary="A person takes the live conversation over: the agent stops and stays silent",
    )
    def post(self, request, session_id: str):
        by = _body(PersonRequestSerializer, request.data).get("by") or DEFAULT_PERSON
        return _control(session_id, "takeover", {"by": by})


class SessionSayView(APIView):
    @extend_schema(
        request=SayRequestSerializer,
        parameters=[SESSION_PATH],
        responses={200: SaidSerializer, **REFUSED},
        tags=["sessions"],
        summary="Say a line to the caller in the agent's voice (after a takeover)",
    )
    def post(self, request, session_id: str):
        data = _body(SayRequestSerializer, request.data)
        return _control(session_id, "say", {"text": data["text"], "by": data.get("by")})


class SessionHandbackView(APIView):
    @extend_schema(
        request=PersonRequestSerializer,
        parameters=[SESSION_PATH],
        responses={200: TakeoverSerializer, **REFUSED},
        tags=["sessions"],
        summary="Hand the conversation back to the agent (it answers at once when the caller spoke last)",
    )
    def post(self, request, session_id: str):
        by = _body(PersonRequestSerializer, request.data).get("by")
        return _control(session_id, "handback", {"by": by})
