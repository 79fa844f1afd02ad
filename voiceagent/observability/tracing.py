"""OpenTelemetry traces over OTLP/HTTP: a span per conversation, per turn, per stage, per request.

Why this shape: tracing is off unless the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set, and then costs the audio path nothing: the engine
makes no tracing call. A turn's spans are built after it closes, from the loop-time marks that
:func:`voiceagent.conversation.timing.observe` hands over, with explicit start and end times
converted to epoch nanoseconds. The conversation span opens when the runtime makes a conversation
and ends from the conversation's close hook. The other standard ``OTEL_*`` variables (headers,
timeout, sampler, ``OTEL_BSP_*``, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``) are read by
the SDK itself; the service name defaults to ``voiceagent``.

The SDK is imported only when tracing is on. Our own provider (not the global one) is set up once
per process by the lifecycle component :func:`start` and flushed and shut down by :func:`stop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.core.exceptions import MiddlewareNotUsed

from voiceagent.conversation.timing import TurnReport, observe
from voiceagent.logging import session_id_var

logger = logging.getLogger("voiceagent.tracing")

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
DEFAULT_SERVICE_NAME = "voiceagent"
# stage span -> (from mark, to mark) of voiceagent.conversation.timing
STAGE_SPANS = {
    "stt": ("speech_end", "transcript"),
    "llm": ("llm_request", "llm_first_token"),
    "tts": ("tts_request", "tts_first_audio"),
}


class _Tracing:
    """The process's tracer provider, tracer and open conversation spans (by session id)."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("voiceagent")
        self.conversations: dict[str, Any] = {}
        self.unsubscribe = observe(_on_turn)


_tracing: _Tracing | None = None


def configured() -> bool:
    """Whether the environment asks for traces (an OTLP endpoint is set)."""
    return any(os.environ.get(name, "").strip() for name in ENDPOINT_VARS)


def enabled() -> bool:
    return _tracing is not None


def setup() -> str:
    """Build the provider with a batch processor and the OTLP/HTTP exporter (once per process)."""
    global _tracing
    if _tracing is not None:
        return "already on"
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()  # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    provider = TracerProvider(resource=resource)
    exporter = OTLPSpanExporter()  # endpoint, headers, timeout, compression from OTEL_*
    provider.add_span_processor(BatchSpanProcessor(exporter))
    _tracing = _Tracing(provider)
    return f"OTLP/HTTP to {getattr(exporter, '_endpoint', '?')} as {resource.attributes[SERVICE_NAME]}"


async def start() -> str:
    """Lifecycle start: tracing on when an OTLP endpoint is configured, else a note that it is off."""
    if not configured():
        return "off (no OTEL_EXPORTER_OTLP_ENDPOINT)"
    return setup()


def shutdown() -> None:
    """Flush the spans still queued, then shut the provider down (tracing is off afterwards)."""
    global _tracing
    state, _tracing = _tracing, None
    if state is None:
        return
    state.unsubscribe()
    for span in state.conversations.values():
        span.end()
    state.provider.force_flush()
    state.provider.shutdown()


async def stop() -> None:
    """Lifecycle stop: the blocking flush (an HTTP export) runs on a thread."""
    if _tracing is not None:
        await asyncio.to_thread(shutdown)


# --- conversations and turns ------------------------------------------------------------------------
def conversation_opened(conversation: Any, mode: str) -> None:
    """Open the conversation's span; it ends from the conversation's close hook."""
    state = _tracing
    if state is None:
        return
    span = state.tracer.start_span(
        "conversation",
        attributes={
            "voiceagent.session_id": conversation.session_id,
            "voiceagent.scenario": conversation.scenario_name,
            "voiceagent.transport": conversation.transport or "",
            "voiceagent.mode": mode,
        },
    )
    old = state.conversations.pop(conversation.session_id, None)
    if old is not None:
        old.end()
    state.conversations[conversation.session_id] = span
    conversation.close_hooks.append(_conversation_closed)


def _conversation_closed(conversation: Any) -> None:
    state = _tracing
    span = state.conversations.pop(conversation.session_id, None) if state is not None else None
    if span is not None:
        span.set_attribute("voiceagent.close_reason", conversation.close_reason or "")
        span.end()


def _attrs(prefix: str, values: dict[str, Any]) -> dict[str, Any]:
    return {f"{prefix}.{k}": v for k, v in values.items() if isinstance(v, int | float | str)}


def _on_turn(report: TurnReport) -> None:
    """A closed turn -> its span under the conversation's, and a span per stage, tool and handoff."""
    state = _tracing
    if state is None:
        return
    from opentelemetry import trace

    now = asyncio.get_running_loop().time()
    offset = time.time_ns() - int(now * 1e9)

    def ns(at: float) -> int:
        return offset + int(at * 1e9)

    marks, latency = report.marks, report.latency_ms
    parent = state.conversations.get(report.session_id)
    turn = state.tracer.start_span(
        "turn",
        context=trace.set_span_in_context(parent) if parent is not None else None,
        start_time=ns(min(marks.values(), default=now)),
        attributes={
            "voiceagent.session_id": report.session_id,
            "voiceagent.turn_index": report.turn_index,
            "voiceagent.agent": report.agent or "",
            "voiceagent.transport": report.transport or "",
            **_attrs("voiceagent.latency_ms", latency),
            **_attrs("voiceagent.usage", report.usage),
        },
    )
    inside = trace.set_span_in_context(turn)

    def child(name: str, start: float, end: float, **attributes: Any) -> None:
        span = state.tracer.start_span(name, context=inside, start_time=ns(start), attributes=attributes)
        span.end(end_time=ns(end))

    for name, (a, b) in STAGE_SPANS.items():
        if a in marks and b in marks:
            child(name, marks[a], marks[b])
    live = parent is not None and parent.attributes.get("voiceagent.mode") == "live"
    if live and "turn_end" in marks and "first_audio_out" in marks:  # one stage: the realtime service's
        child("realtime", marks["turn_end"], marks["first_audio_out"])
    for i, tool in enumerate(latency.get("tools") or [], start=1):
        end = marks.get(f"tool_end_{i}")
        if end is not None:
            child(f"tool {tool['name']}", end - tool["ms"] / 1000.0, end, **{"voiceagent.tool": tool["name"]})
    handoff_ms, handoff_end = latency.get("handoff"), marks.get("handoff_end")
    if handoff_ms is not None and handoff_end is not None:
        child(
            "handoff",
            handoff_end - handoff_ms / 1000.0,
            handoff_end,
            **{"voiceagent.agent": report.agent or ""},
        )
    turn.end(end_time=ns(now))


# --- MCP calls and HTTP requests --------------------------------------------------------------------
@contextlib.contextmanager
def mcp_call(server: str, tool: str) -> Iterator[None]:
    """A span around one MCP tool call: under the request's span, or the conversation's."""
    state = _tracing
    if state is None:
        yield
        return
    from opentelemetry import trace

    context = None
    if not trace.get_current_span().get_span_context().is_valid:
        conversation = state.conversations.get(session_id_var.get() or "")
        context = trace.set_span_in_context(conversation) if conversation is not None else None
    attributes = {"voiceagent.mcp.server": server, "voiceagent.mcp.tool": tool}
    with state.tracer.start_as_current_span(f"mcp {server}", context=context, attributes=attributes) as span:
        try:
            yield
        except BaseException as exc:
            span.set_attribute("voiceagent.mcp.outcome", getattr(exc, "kind", type(exc).__name__))
            raise
        span.set_attribute("voiceagent.mcp.outcome", "ok")


class TracingMiddleware:
    """A server span per API request and webhook (first in ``API_MIDDLEWARE``). Not loaded at all
    when no OTLP endpoint is configured, so tracing off costs nothing per request."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Any) -> None:
        if not configured():
            raise MiddlewareNotUsed("tracing off")
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: Any) -> Any:
        if self.is_async:
            return self._acall(request)
        with self._span(request) as span:
            return _ended(span, request, self.get_response(request))

    async def _acall(self, request: Any) -> Any:
        with self._span(request) as span:
            return _ended(span, request, await self.get_response(request))

    @staticmethod
    def _span(request: Any) -> contextlib.AbstractContextManager[Any]:
        state = _tracing
        if state is None:
            return contextlib.nullcontext()
        from opentelemetry import propagate
        from opentelemetry.trace import SpanKind

        return state.tracer.start_as_current_span(
            f"{request.method} {request.path}",
            context=propagate.extract(request.headers),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": request.method, "url.path": request.path},
        )


def _ended(span: Any, request: Any, response: Any) -> Any:
    if span is not None:
        span.set_attribute("http.response.status_code", response.status_code)
        route = getattr(getattr(request, "resolver_match", None), "route", None)
        if route:  # the route names the span: one name per endpoint, not per id
            span.set_attribute("http.route", f"/{route}")
            span.update_name(f"{request.method} /{route}")
    return response
