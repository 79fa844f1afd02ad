"""``GET /api/v1/scenarios/{name}/graph.svg``: the picture of a scenario (:mod:`agents_app.scenario_graph`).

Authenticated like the other scenario endpoints (the API's default permission); a scenario is
found as ``GET /scenarios/{name}`` finds it (built-in, or that ``session_id``'s own). The answer
is an SVG document; every refusal is JSON ``{"detail"}`` whatever the client accepts.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from agents_app import sessions
from agents_app.catalog import catalog
from agents_app.scenario_graph import GraphUnavailable, picture_of_spec, render_svg
from agents_app.views import SESSION_PARAM, _session_agents, _session_param, _session_scenarios
from voiceagent.errors import ApiError


class SvgRenderer(BaseRenderer):
    media_type = "image/svg+xml"
    format = "svg"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        return data.encode("utf-8") if isinstance(data, str) else b""


class AlwaysSvg(BaseContentNegotiation):
    """One representation: no 406 for a client that asks for JSON (its refusals are JSON)."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class GraphErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()


class ScenarioGraphView(APIView):
    renderer_classes = [SvgRenderer]
    content_negotiation_class = AlwaysSvg

    @extend_schema(
        parameters=[SESSION_PARAM],
        responses={
            (200, "image/svg+xml"): OpenApiResponse(
                OpenApiTypes.STR,
                description="the scenario as a picture: agents (the start agent marked, their "
                "tools listed), handoffs as arrows labelled with the trigger tool and the type",
            ),
            (503, "application/json"): OpenApiResponse(
                GraphErrorSerializer,
                description="no picture: Graphviz missing, too slow, or the scenario too large to draw",
            ),
        },
        operation_id="scenarios_graph",
        tags=["scenarios"],
        summary="A picture of the scenario (SVG, laid out by Graphviz)",
    )
    def get(self, request, name: str):
        session_id = _session_param(request)
        state = sessions.load_state(session_id) if session_id else None
        spec = catalog.scenario(name)
        if spec is None and state is not None:
            spec = _session_scenarios(state).get(name.lower())
        if spec is None:
            raise ApiError(f"Scenario {name!r} not found.", 404)
        agents = {a.name: a for a in catalog.agents.values()}
        agents.update({a.name: a for a in _session_agents(state).values()})
        try:
            svg = render_svg(picture_of_spec(spec, agents))
        except GraphUnavailable as exc:
            raise ApiError(f"No picture of scenario {spec.name!r}: {exc}.", 503) from None
        return Response(svg, content_type="image/svg+xml")

    def finalize_response(self, request, response, *args, **kwargs):
        """The picture is SVG and a refusal JSON, whatever the client asked for."""
        if isinstance(response, Response):
            if isinstance(response.data, str):
                request.accepted_renderer, request.accepted_media_type = SvgRenderer(), SvgRenderer.media_type
            else:
                request.accepted_renderer, request.accepted_media_type = JSONRenderer(), "application/json"
        return super().finalize_response(request, response, *args, **kwargs)
