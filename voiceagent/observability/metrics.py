"""Prometheus metrics of the service: what happened, counted where it passes once.

Why here, and fed this way: an operator scrapes ``GET /metrics`` to see how many conversations,
turns, tool calls and errors there were and how slow the turns were. Nothing is counted on the
audio path; each figure is taken at the one point every transport's conversations pass:

- closed turns: a :func:`voiceagent.conversation.timing.observe` subscriber (turns, and the stage
  latencies of :data:`~voiceagent.conversation.timing.STAGES` in the histogram);
- the transport driver: a conversation's start, and its end through the conversation's close
  hook (conversations, active conversations); every engine event but ``Audio`` through
  :func:`count_event`, one dict lookup by event type (errors by ``Error.code``, tool calls,
  handoffs, barge-ins);
- answers begun in the caller's pause (:mod:`voiceagent.conversation.head_start`): begun, used
  (the turn asked what it had asked) and dropped (the caller went on: a model request for nothing);
- end-of-turn model requests by outcome (:data:`voiceagent.speech.turn_model.OUTCOMES`): scored,
  or the pause judged by the words alone (shed, late, full, gave_way: a loaded process);
- MCP calls: :func:`mcp_call`, from ``mcp_app``'s manager (apps call the runtime, not the reverse);
- the speech pools (clients in use, warm, refusals): sampled from :mod:`voiceagent.speech.pools`
  at each conversation start and end, closed turn, ``Error`` event and scrape.

Under ``uvicorn --workers N`` the figures of every worker add up through prometheus-client's
multiprocess mode; :mod:`.multiproc` chooses the directory before ``prometheus_client`` loads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings

from voiceagent.conversation import events as ev
from voiceagent.conversation import head_start
from voiceagent.conversation.timing import STAGES, TurnReport, observe
from voiceagent.observability import multiproc
from voiceagent.speech import turn_model
from voiceagent.speech.pools import POOLS

ENABLED = bool(settings.CONFIG.METRICS_ENABLED)  # off: nothing counted, /metrics is a 404
MULTIPROC_DIR = multiproc.configure(settings.CONFIG.PROMETHEUS_MULTIPROC_DIR)

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram  # noqa: E402
from prometheus_client.exposition import choose_encoder  # noqa: E402
from prometheus_client.multiprocess import MultiProcessCollector  # noqa: E402

LATENCY_BUCKETS_S = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)

TURN_LATENCY = Histogram(
    "voiceagent_turn_latency_seconds",
    "Per-turn stage latency (stt, llm_first_token, tts_first_audio, end_to_first_audio)",
    ["stage", "transport"],
    buckets=LATENCY_BUCKETS_S,
)
CONVERSATIONS = Counter("voiceagent_conversations", "Conversations started", ["transport", "mode"])
TURNS = Counter("voiceagent_turns", "Assistant turns closed (measured)", ["transport"])
ERRORS = Counter("voiceagent_errors", "Error events told to the caller, by code", ["kind"])
TOOL_CALLS = Counter("voiceagent_tool_calls", "Tool calls by tool and outcome", ["tool", "outcome"])
HANDOFFS = Counter("voiceagent_handoffs", "Handoffs between agents", ["type"])
BARGE_INS = Counter("voiceagent_barge_ins", "Agent audio stopped by the caller", ["transport"])
POOL_REFUSALS = Counter("voiceagent_pool_refusals", "Speech pool leases refused (timed out)", ["pool"])
MCP_CALLS = Counter("voiceagent_mcp_calls", "MCP tool calls by server and outcome", ["server", "outcome"])
HEAD_STARTS = Counter(
    "voiceagent_head_starts", "Answers begun in the caller's pause: begun, used, dropped", ["outcome"]
)
TURN_MODEL_REQUESTS = Counter(
    "voiceagent_turn_model_requests",
    "End-of-turn model requests: scored, failed, judged by words alone (shed, late, full, gave_way), stale",
    ["outcome"],
)
ACTIVE = Gauge(
    "voiceagent_active_conversations", "Conversations running", ["transport"], multiprocess_mode="livesum"
)
POOL_IN_USE = Gauge(
    "voiceagent_pool_clients_in_use", "Speech clients leased", ["pool"], multiprocess_mode="livesum"
)
RECORDING_DROPPED = Counter(
    "voiceagent_recording_dropped", "Recording items dropped: the writer's queue was full"
)
RECORDING_CHUNKS_WRITTEN = Counter("voiceagent_recording_chunks_written", "Recording chunks stored")
RECORDING_QUEUE_DEPTH = Gauge(
    "voiceagent_recording_queue_depth", "Recording items waiting for the writer", multiprocess_mode="livesum"
)
POOL_WARM = Gauge(
    "voiceagent_pool_clients_warm", "Speech clients idle and ready", ["pool"], multiprocess_mode="livesum"
)


# --- closed turns ---------------------------------------------------------------------------------
def on_turn(report: TurnReport) -> None:
    """A closed turn: counted, and each stage that ran observed in the histogram (seconds)."""
    transport = report.transport or "none"
    TURNS.labels(transport).inc()
    latency = report.latency_ms
    for stage in STAGES:
        ms = latency.get(stage)
        if ms is not None:
            TURN_LATENCY.labels(stage, transport).observe(ms / 1000.0)
    sample_pools()


if ENABLED:
    observe(on_turn)  # process-wide, once: this module is imported once
    head_start.on_outcome(lambda outcome: HEAD_STARTS.labels(outcome).inc())
    turn_model.on_outcome(lambda outcome: TURN_MODEL_REQUESTS.labels(outcome).inc())


# --- conversations and their events ---------------------------------------------------------------
def conversation_started(conversation: Any, transport: str, mode: str | None) -> None:
    """A started conversation: counted, and active until it closes, however it closes (a
    codec may drop it without ending it through the driver: the agent or the service ended it)."""
    if not ENABLED:
        return
    kind = (mode or "").strip().lower()
    kind = kind if kind in ("live", "monitor") else "cascade"  # monitor: listen only (AudioHook)
    CONVERSATIONS.labels(transport, kind).inc()
    if not conversation.closed:
        ACTIVE.labels(transport).inc()
        conversation.close_hooks.append(lambda _: _conversation_closed(transport))
    sample_pools()


def _conversation_closed(transport: str) -> None:
    ACTIVE.labels(transport).dec()
    sample_pools()


def _error(event: Any, transport: str) -> None:
    ERRORS.labels(event.code).inc()
    sample_pools()  # a refused lease is told as stt_error / tts_error


def _tool_call(event: Any, transport: str) -> None:
    TOOL_CALLS.labels(event.name, "ok" if event.ok else "error").inc()


def _handoff(event: Any, transport: str) -> None:
    HANDOFFS.labels(event.type).inc()


def _stop_audio(event: Any, transport: str) -> None:
    if event.reason == "barge_in":
        BARGE_INS.labels(transport).inc()


_BY_TYPE: dict[type, Callable[[Any, str], None]] = {
    ev.Error: _error,
    ev.ToolCall: _tool_call,
    ev.Handoff: _handoff,
    ev.StopAudio: _stop_audio,
}


def count_event(event: ev.Event, transport: str) -> None:
    """An engine event on its way to the transport: counted when it is one that counts."""
    if not ENABLED:
        return
    handler = _BY_TYPE.get(type(event))
    if handler is not None:
        handler(event, transport)


def mcp_call(server: str, outcome: str) -> None:
    """One MCP tool call: ``ok``, ``tool_error`` (the tool said isError) or the failure's kind."""
    if not ENABLED:
        return
    MCP_CALLS.labels(server, outcome).inc()


# --- speech pools ---------------------------------------------------------------------------------
_refused_seen: dict[str, tuple[int, int]] = {}  # pool name -> (id of the pool, refusals counted)


def sample_pools() -> None:
    """This process's pool use into the gauges; refusals since the last sample into the counter."""
    for name, pool in list(POOLS.items()):
        figures = pool.metrics()
        POOL_IN_USE.labels(name).set(figures["in_use"])
        POOL_WARM.labels(name).set(figures["warm"])
        refused = figures["refused_total"]
        seen_pool, seen = _refused_seen.get(name, (id(pool), 0))
        if seen_pool != id(pool):  # a new pool under that name: its count starts at zero
            seen = 0
        if refused > seen:
            POOL_REFUSALS.labels(name).inc(refused - seen)
        _refused_seen[name] = (id(pool), refused)


# --- exposition -----------------------------------------------------------------------------------
def exposition(accept: str | None) -> tuple[bytes, str]:
    """(body, content type) of a scrape: every worker's figures in multiprocess mode, this
    process's otherwise; the text format the ``Accept`` header asks for (OpenMetrics or 0.0.4)."""
    sample_pools()
    registry = REGISTRY
    if MULTIPROC_DIR:
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=MULTIPROC_DIR)
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type
