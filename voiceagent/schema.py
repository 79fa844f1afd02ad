"""drf-spectacular extensions: describe our API-key authentication in the OpenAPI schema."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "voiceagent.auth.ApiKeyAuthentication"
    name = ["ApiKeyBearer", "ApiKeyHeader"]

    def get_security_definition(self, auto_schema):
        return [
            {"type": "http", "scheme": "bearer", "description": "Authorization: Bearer <api key>"},
            {"type": "apiKey", "in": "header", "name": "X-API-Key"},
        ]
