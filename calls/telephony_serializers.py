"""Request and response shapes of the telephony REST endpoints (CONTRACTS "Calls and media").

Request serializers validate the service's own endpoints; the provider webhooks
(``/calls/answer``, ``/calls/callbacks``) are validated by :mod:`calls.telephony_views` with
precise messages, and the serializers below only document their shape in the OpenAPI schema.
"""

from __future__ import annotations

from rest_framework import serializers

from agents_app.strict_bodies import StrictSerializer
from calls.models import DIRECTIONS, MODES, STATUSES

PHONE_NUMBER_RE = r"^\+[0-9]{8,15}\Z"


class CallErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()
    errors = serializers.DictField(child=serializers.ListField(child=serializers.CharField()), required=False)


class InitiateRequestSerializer(StrictSerializer):
    phone_number = serializers.RegexField(
        PHONE_NUMBER_RE,
        max_length=16,
        error_messages={"invalid": "must be + followed by 8-15 digits (E.164)"},
    )
    scenario = serializers.CharField(max_length=64, required=False, allow_null=True, allow_blank=True)


class InitiateResponseSerializer(serializers.Serializer):
    connection_id = serializers.CharField()
    status = serializers.ChoiceField(choices=["initiating"])
    phone_number = serializers.CharField()
    scenario = serializers.CharField()
    session_id = serializers.CharField()


class CallSerializer(serializers.Serializer):
    connection_id = serializers.CharField()
    direction = serializers.ChoiceField(choices=list(DIRECTIONS))
    phone_number = serializers.CharField()
    scenario = serializers.CharField()
    session_id = serializers.CharField()
    status = serializers.ChoiceField(choices=list(STATUSES))
    started_at = serializers.CharField(allow_null=True, help_text="ISO-8601 UTC")
    ended_at = serializers.CharField(allow_null=True, help_text="ISO-8601 UTC")
    duration_s = serializers.FloatField(allow_null=True)
    mode = serializers.ChoiceField(choices=list(MODES))
    created_at = serializers.CharField(help_text="ISO-8601 UTC")
    failure_reason = serializers.CharField(allow_null=True)


class CallListSerializer(serializers.Serializer):
    calls = CallSerializer(many=True)
    total = serializers.IntegerField()
    page = serializers.IntegerField()
    page_size = serializers.IntegerField()


class TerminateRequestSerializer(StrictSerializer):
    connection_id = serializers.CharField(max_length=200)


class TerminateResponseSerializer(serializers.Serializer):
    connection_id = serializers.CharField()
    status = serializers.ChoiceField(choices=["terminating"])


class EventGridEventSerializer(serializers.Serializer):
    """One Event Grid event (the body is a JSON array of them)."""

    id = serializers.CharField(required=False)
    topic = serializers.CharField(required=False)
    subject = serializers.CharField(required=False)
    eventType = serializers.ChoiceField(
        choices=["Microsoft.EventGrid.SubscriptionValidationEvent", "Microsoft.Communication.IncomingCall"]
    )
    eventTime = serializers.CharField(required=False)
    data = serializers.DictField(
        help_text="validation: {validationCode}; incoming call: {from, to, incomingCallContext, "
        "serverCallId, correlationId, callerDisplayName, customContext}"
    )
    dataVersion = serializers.CharField(required=False)
    metadataVersion = serializers.CharField(required=False)


class AnswerResponseSerializer(serializers.Serializer):
    """Either the validation handshake's reply or the answered call."""

    validationResponse = serializers.CharField(required=False, help_text="subscription validation only")
    status = serializers.ChoiceField(choices=["answered"], required=False, help_text="incoming call only")
    connection_id = serializers.CharField(required=False, help_text="incoming call only")


class CloudEventSerializer(serializers.Serializer):
    """One CloudEvents 1.0 callback event (the body is a JSON array of them)."""

    id = serializers.CharField()
    source = serializers.CharField(help_text="calling/callConnections/{callConnectionId}")
    type = serializers.CharField(help_text="Microsoft.Communication.<Name>, e.g. CallConnected")
    specversion = serializers.ChoiceField(choices=["1.0"])
    time = serializers.CharField(required=False)
    subject = serializers.CharField(required=False)
    datacontenttype = serializers.CharField(required=False)
    data = serializers.DictField(
        help_text="callConnectionId (required), serverCallId, correlationId, operationContext, "
        "resultInformation {code, subCode, message}, ..."
    )


class CallbacksResponseSerializer(serializers.Serializer):
    processed = serializers.IntegerField()
