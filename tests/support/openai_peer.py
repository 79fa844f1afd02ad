"""A local OpenAI-compatible HTTP server for tests: the real wire protocol, scripted behaviour.

It runs uvicorn + Starlette on 127.0.0.1 (a free port) in a background thread with its own event
loop, so the code under test talks to it over real sockets with the real ``openai`` client.

Routes:

* ``POST /v1/chat/completions`` and Azure's
  ``POST /openai/deployments/{deployment}/chat/completions?api-version=...``: ``stream: true``
  answers Server-Sent Events (``data: {chat.completion.chunk}`` lines, ending with
  ``data: [DONE]``), tool calls streamed as deltas split over several chunks (index, id,
  function.name, then argument fragments); ``stream: false`` answers one ``chat.completion``.
* ``GET /v1/models`` and ``GET /openai/models`` (Azure).

Each chat request takes the next scripted response from the queue (:meth:`OpenAIPeer.push`):
:class:`Text`, :class:`ToolCalls`, :class:`RawEvents` or :class:`HTTPError`, each with an
optional ``delay`` before the response starts. An empty queue answers :attr:`OpenAIPeer.default`.
Every request is recorded (:attr:`OpenAIPeer.requests`) with its path, query, headers and JSON
body.

:meth:`OpenAIPeer.fail` is a switch for an outage: until :meth:`OpenAIPeer.heal` (or
:meth:`OpenAIPeer.reset`) every chat request answers that HTTP error, scripted responses wait.

With ``api_key`` set, requests must carry it (``Authorization: Bearer`` on the OpenAI routes,
``api-key`` or a bearer token on the Azure routes); ``bearer_tokens`` adds accepted Entra tokens.

Usage::

    with OpenAIPeer(api_key="k") as peer:
        peer.push(Text("Hello there, how can I help?", chunks=4))
        client = openai.AsyncOpenAI(base_url=peer.openai_base_url, api_key="k")
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from threaded_server import ThreadedAsgiServer

__all__ = [
    "HTTPError",
    "OpenAIPeer",
    "RawEvents",
    "RecordedRequest",
    "Text",
    "ToolCall",
    "ToolCalls",
    "split_text",
]


# --------------------------------------------------------------------------------------------------
# Scripted responses
# --------------------------------------------------------------------------------------------------


@dataclass
class Text:
    """Stream ``text`` in ``chunks`` pieces (split at word boundaries)."""

    text: str
    chunks: int = 3
    finish_reason: str = "stop"
    delay: float = 0.0  # seconds before the response starts (headers included)
    chunk_delay: float = 0.0  # seconds between chunks


@dataclass
class ToolCall:
    name: str
    arguments: str | dict
    id: str | None = None

    @property
    def arguments_json(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass
class ToolCalls:
    """Stream optional ``text`` then the tool calls, each call's arguments in ``fragments`` pieces."""

    calls: list[ToolCall]
    text: str = ""
    text_chunks: int = 2
    fragments: int = 3
    finish_reason: str = "tool_calls"
    delay: float = 0.0
    chunk_delay: float = 0.0


@dataclass
class HTTPError:
    """Answer ``status`` with an OpenAI-shaped error body."""

    status: int = 500
    message: str = "The server had an error while processing your request."
    code: str | None = None
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=lambda: {"retry-after-ms": "10"})


@dataclass
class RawEvents:
    """Stream these ``data:`` payloads as given (JSON values are dumped, strings go as they are),
    then ``data: [DONE]`` (``stream: true`` only): the shapes real servers send that ``Text`` and
    ``ToolCalls`` do not (Azure's empty-choices filter chunk, nulls, an in-stream error, malformed
    chunks)."""

    events: list[Any]
    delay: float = 0.0


Scripted = Text | ToolCalls | HTTPError | RawEvents


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    at: float = field(default_factory=time.monotonic)

    @property
    def deployment(self) -> str | None:
        parts = self.path.strip("/").split("/")
        if len(parts) >= 3 and parts[0] == "openai" and parts[1] == "deployments":
            return parts[2]
        return None


def split_text(text: str, parts: int) -> list[str]:
    """``text`` split into at most ``parts`` pieces at word boundaries (pieces keep their spaces)."""
    words = text.split(" ")
    parts = max(1, min(parts, len(words)))
    size, extra = divmod(len(words), parts)
    pieces, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        piece = " ".join(words[start:end])
        pieces.append(piece + (" " if end < len(words) else ""))
        start = end
    return [p for p in pieces if p]


def _split_string(value: str, parts: int) -> list[str]:
    parts = max(1, min(parts, len(value) or 1))
    step = -(-len(value) // parts) if value else 1
    return [value[i : i + step] for i in range(0, len(value), step)] or [""]


# --------------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------------


class OpenAIPeer(ThreadedAsgiServer):
    """Start with ``with OpenAIPeer() as peer:`` (or :meth:`start` / :meth:`stop`)."""

    label = "OpenAI peer"

    def __init__(
        self,
        api_key: str | None = None,
        bearer_tokens: tuple[str, ...] = (),
        models: tuple[str, ...] = ("peer-model",),
    ) -> None:
        super().__init__()
        self.api_key = api_key
        self.bearer_tokens = tuple(bearer_tokens)
        self.models = models
        self.default: Scripted = Text("Hello from the local peer.")
        self.models_status = 200
        self.failure: HTTPError | None = None  # set: every chat request answers it (an outage)
        self.requests: list[RecordedRequest] = []
        self._queue: deque[Scripted] = deque()
        self._lock = threading.Lock()
        self._counter = 0

    # --- scripting ---------------------------------------------------------------------------------
    def push(self, *responses: Scripted) -> OpenAIPeer:
        with self._lock:
            self._queue.extend(responses)
        return self

    def fail(
        self, status: int = 500, message: str = "The server had an error while processing your request."
    ) -> None:
        """From now on every chat request answers ``status`` (the queue waits) until :meth:`heal`."""
        self.failure = HTTPError(status, message)

    def heal(self) -> None:
        self.failure = None

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests.clear()
        self.default = Text("Hello from the local peer.")
        self.models_status = 200
        self.failure = None

    @property
    def pending(self) -> int:
        return len(self._queue)

    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def last_body(self) -> Any:
        chats = self.chat_requests()
        return chats[-1].body if chats else None

    # --- addresses ---------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def azure_endpoint(self) -> str:
        return self.url

    # --- the ASGI app ------------------------------------------------------------------------------
    def _app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route(
                    "/openai/deployments/{deployment}/chat/completions", self._azure_chat, methods=["POST"]
                ),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/openai/models", self._azure_models, methods=["GET"]),
            ]
        )

    async def _record(self, request: Request) -> RecordedRequest:
        raw = await request.body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        record = RecordedRequest(
            method=request.method,
            path=request.url.path,
            query=dict(request.query_params),
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
        )
        with self._lock:
            self.requests.append(record)
        return record

    def _authorized(self, record: RecordedRequest, azure: bool) -> bool:
        if self.api_key is None and not self.bearer_tokens:
            return True
        auth = record.headers.get("authorization", "")
        token = auth[7:] if auth.lower().startswith("bearer ") else None
        if token is not None and token in self.bearer_tokens:
            return True
        if self.api_key is None:
            return False
        if azure:
            return record.headers.get("api-key") == self.api_key or token == self.api_key
        return token == self.api_key

    def _next(self) -> Scripted:
        if self.failure is not None:
            return self.failure
        with self._lock:
            return self._queue.popleft() if self._queue else self.default

    async def _chat(self, request: Request) -> Response:
        return await self._serve_chat(request, azure=False)

    async def _azure_chat(self, request: Request) -> Response:
        return await self._serve_chat(request, azure=True)

    async def _serve_chat(self, request: Request, azure: bool) -> Response:
        record = await self._record(request)
        if azure and not record.query.get("api-version"):
            return _error(404, "Resource not found (missing api-version)", "404")
        if not self._authorized(record, azure):
            return _error(401, "Access denied due to invalid subscription key or wrong API endpoint.", "401")
        if not isinstance(record.body, dict) or not isinstance(record.body.get("messages"), list):
            return _error(400, "messages is required", "invalid_request_error")
        scripted = self._next()
        if scripted.delay:
            await asyncio.sleep(scripted.delay)
        if isinstance(scripted, HTTPError):
            return _error(scripted.status, scripted.message, scripted.code, scripted.headers)
        with self._lock:
            self._counter += 1
            completion_id = f"chatcmpl-peer{self._counter:06d}"
        model = record.deployment or str(record.body.get("model") or self.models[0])
        if record.body.get("stream"):
            return StreamingResponse(
                self._sse(scripted, completion_id, model, record.body.get("stream_options") or {}),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache", "x-request-id": completion_id},
            )
        return JSONResponse(_completion(scripted, completion_id, model))

    async def _sse(
        self, scripted: Text | ToolCalls | RawEvents, completion_id: str, model: str, options: dict
    ):
        if isinstance(scripted, RawEvents):
            for payload in scripted.events:
                yield f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n".encode()
            yield b"data: [DONE]\n\n"
            return
        created = int(time.time())

        def event(delta: dict, finish_reason: str | None = None) -> bytes:
            chunk = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": "fp_peer",
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
            }
            return f"data: {json.dumps(chunk)}\n\n".encode()

        deltas: list[dict] = [{"role": "assistant", "content": ""}]
        if isinstance(scripted, Text):
            deltas += [{"content": piece} for piece in split_text(scripted.text, scripted.chunks)]
        else:
            if scripted.text:
                deltas += [{"content": piece} for piece in split_text(scripted.text, scripted.text_chunks)]
            for index, call in enumerate(scripted.calls):
                call_id = call.id or f"call_peer{index}_{completion_id[-6:]}"
                deltas.append(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call_id,
                                "type": "function",
                                "function": {"name": call.name, "arguments": ""},
                            }
                        ]
                    }
                )
                for fragment in _split_string(call.arguments_json, scripted.fragments):
                    deltas.append({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
        for delta in deltas:
            yield event(delta)
            if scripted.chunk_delay:
                await asyncio.sleep(scripted.chunk_delay)
        yield event({}, scripted.finish_reason)
        if options.get("include_usage"):  # as OpenAI: a last chunk with no choices, the usage
            usage = {"prompt_tokens": 1, "completion_tokens": max(1, len(deltas) - 1)}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            chunk = {"id": completion_id, "object": "chat.completion.chunk", "created": created}
            chunk.update(model=model, choices=[], usage=usage)
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    async def _models(self, request: Request) -> Response:
        record = await self._record(request)
        if not self._authorized(record, azure=False):
            return _error(401, "Incorrect API key provided.", "invalid_api_key")
        return self._models_response()

    async def _azure_models(self, request: Request) -> Response:
        record = await self._record(request)
        if not self._authorized(record, azure=True):
            return _error(401, "Access denied due to invalid subscription key or wrong API endpoint.", "401")
        return self._models_response()

    def _models_response(self) -> Response:
        if self.models_status != 200:
            return _error(
                self.models_status, "models unavailable", str(self.models_status), {"retry-after-ms": "10"}
            )
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": m, "object": "model", "created": 0, "owned_by": "peer"} for m in self.models],
            }
        )


def _error(status: int, message: str, code: str | None, headers: dict[str, str] | None = None) -> Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def _completion(scripted: Text | ToolCalls, completion_id: str, model: str) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": scripted.text or None}
    if isinstance(scripted, ToolCalls):
        message["tool_calls"] = [
            {
                "id": call.id or f"call_peer{i}_{completion_id[-6:]}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json},
            }
            for i, call in enumerate(scripted.calls)
        ]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": "fp_peer",
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": scripted.finish_reason}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
