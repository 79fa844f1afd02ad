"""drf-spectacular extensions: our API-key authentication, and the answers every endpoint can give,
in the OpenAPI schema (so that a client generated from it, or a schema-driven tester, expects what
the endpoints really answer)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension

ERROR = {"$ref": "#/components/schemas/Error"}
ERROR_COMPONENT = {"type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"]}
COMMON_ANSWERS = {  # status: (when it applies, description)
    "400": ("input", "Invalid request: `detail` says what is wrong (`errors`, where given, per field)."),
    "401": ("secured", "No valid API key (`Authorization: Bearer <key>` or `X-API-Key`)."),
    "404": ("path", "Nothing of that name or id (`detail` says which)."),
    "413": ("body", "Request body too large (`DATA_UPLOAD_MAX_MEMORY_SIZE`)."),
}


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "voiceagent.auth.ApiKeyAuthentication"
    name = ["ApiKeyBearer", "ApiKeyHeader"]

    def get_security_definition(self, auto_schema):
        return [
            {"type": "http", "scheme": "bearer", "description": "Authorization: Bearer <api key>"},
            {"type": "apiKey", "in": "header", "name": "X-API-Key"},
        ]

    def get_security_requirement(self, auto_schema):
        # either scheme is enough: two requirement objects (one object naming both means both)
        return [{"ApiKeyBearer": []}, {"ApiKeyHeader": []}]


def _applies(when: str, operation: dict[str, Any]) -> bool:
    has_body = "requestBody" in operation
    if when == "body":
        return has_body
    if when == "secured":
        return any(operation.get("security") or [])
    places = {p.get("in") for p in operation.get("parameters", [])}
    if when == "path":
        return "path" in places
    return has_body or bool(places & {"query", "path"})


def document_common_answers(result: dict, generator, request, public) -> dict:
    """Postprocessing hook: add the answers the framework gives on every endpoint (bad input, no
    key, body too large) where a view did not declare them itself."""
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components.setdefault("Error", ERROR_COMPONENT)
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            answers = operation.get("responses") if isinstance(operation, dict) else None
            if answers is None:
                continue
            _require_body_with_fields(operation, components)
            for status, (when, description) in COMMON_ANSWERS.items():
                if status not in answers and _applies(when, operation):
                    answers[status] = {
                        "description": description,
                        "content": {"application/json": {"schema": ERROR}},
                    }
    return result


def _require_body_with_fields(operation: dict[str, Any], components: dict[str, Any]) -> None:
    """A body whose schema needs some field cannot be left out: say the body is required (an
    endpoint whose fields are all optional takes no body at all)."""
    for media in operation.get("requestBody", {}).get("content", {}).values():
        ref = media.get("schema", {}).get("$ref", "")
        body = components.get(ref.rsplit("/", 1)[-1], {}) if ref else media.get("schema", {})
        if body.get("required") or body.get("minProperties") or body.get("type") == "array":
            operation["requestBody"]["required"] = True
