"""Request bodies that are exactly what the OpenAPI schema says: no undeclared field, no value of
another JSON type, and the schema saying so (``additionalProperties: false``). The base of every
request serializer of the REST API (agents, calls, MCP)."""

from __future__ import annotations

import inspect

from drf_spectacular.extensions import OpenApiSerializerExtension
from rest_framework import serializers


class StrictSerializer(serializers.Serializer):
    """Rejects fields it does not declare, and a value of another JSON type than its field's (DRF
    would take ``0`` for the text ``"0"``, ``false`` for the number 0 and ``"5"`` for 5): the body
    must be what the OpenAPI schema says.
    ``min_fields``: the least number of fields a body must send (the schema's ``minProperties``)."""

    min_fields = 0

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["Expected a JSON object."]})
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        wrong = {name: _json_type_error(self.fields[name], value) for name, value in data.items()}
        if any(wrong.values()):
            raise serializers.ValidationError({name: [why] for name, why in wrong.items() if why})
        return super().to_internal_value(data)


class StrictSerializerSchema(OpenApiSerializerExtension):
    """In the OpenAPI schema, a strict request body says so: no other property
    (``additionalProperties: false``) and at least ``min_fields`` of them."""

    target_class = StrictSerializer
    match_subclasses = True

    @property
    def target_type(self) -> type:
        return self.target if inspect.isclass(self.target) else type(self.target)

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        own = vars(self.target_type).get("__doc__")
        if own:  # the body's own docstring, not StrictSerializer's inherited one
            schema["description"] = inspect.cleandoc(own)
        else:
            schema.pop("description", None)
        schema["additionalProperties"] = False
        if self.target.min_fields:
            schema["minProperties"] = self.target.min_fields
        return schema


def _json_type_error(field: serializers.Field, value) -> str | None:
    """What is wrong with the JSON type of ``value`` for ``field`` (None: nothing). ``None`` is left
    to the field's own ``allow_null``; lists and maps are checked item by item."""
    if value is None:
        return None
    if isinstance(field, serializers.ListField) and isinstance(value, list):
        return next(filter(None, (_json_type_error(field.child, v) for v in value)), None)
    if isinstance(field, serializers.DictField) and isinstance(value, dict):
        return next(filter(None, (_json_type_error(field.child, v) for v in value.values())), None)
    if isinstance(field, serializers.CharField) and not isinstance(value, str):
        return "Expected a string."
    if isinstance(field, serializers.BooleanField) and not isinstance(value, bool):
        return "Expected true or false."
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(field, serializers.IntegerField) and not (number and float(value).is_integer()):
        return "Expected an integer."
    if isinstance(field, serializers.FloatField) and not number:
        return "Expected a number."
    return None
